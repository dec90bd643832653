use super::*;
use proptest::prelude::*;

/// A record in memory: (time, interval), or None for an untimed one.
type Rec = Option<(i64, Option<(i64, i64)>)>;
/// What was written: (lane, line, verdict; None for untimed).
type Written = Vec<(usize, u64, Option<Order>)>;

/// Records in memory.
struct Mem {
    name: String,
    records: std::vec::IntoIter<Rec>,
    line: u64,
    lane: usize,
}

impl Source for Mem {
    type Item = (usize, u64);
    fn next(&mut self) -> Result<Next<(usize, u64)>, MergeError> {
        self.line += 1;
        Ok(match self.records.next() {
            None => Next::End,
            Some(None) => Next::Untimed((self.lane, self.line)),
            Some(Some((t, interval))) => Next::Timed {
                t,
                interval,
                line: self.line,
                item: (self.lane, self.line),
            },
        })
    }
    fn name(&self) -> &str {
        &self.name
    }
}

#[derive(Default)]
struct Out(Written);

impl Sink<(usize, u64)> for Out {
    fn record(
        &mut self,
        &mut (lane, line): &mut (usize, u64),
        order: Order,
    ) -> Result<(), MergeError> {
        self.0.push((lane, line, Some(order)));
        Ok(())
    }
    fn untimed(&mut self, &mut (lane, line): &mut (usize, u64)) -> Result<(), MergeError> {
        self.0.push((lane, line, None));
        Ok(())
    }
}

type Lanes = Vec<Vec<Rec>>;

fn run(lanes: &Lanes, window: usize) -> Result<(Written, MergeSummary), MergeError> {
    let sources = lanes
        .iter()
        .enumerate()
        .map(|(k, r)| Mem {
            name: format!("f{k}"),
            records: r.clone().into_iter(),
            line: 0,
            lane: k,
        })
        .collect();
    let mut out = Out::default();
    let summary = merge(sources, &mut out, window)?;
    Ok((out.0, summary))
}

#[test]
fn merges_by_time_and_flags_what_the_intervals_guarantee() {
    let lanes: Lanes = vec![
        vec![
            Some((10, Some((8, 12)))),
            Some((30, Some((28, 32)))),
            Some((50, None)),
        ],
        vec![
            Some((13, Some((11, 15)))),
            Some((40, Some((33, 47)))),
            Some((41, Some((34, 48)))),
        ],
    ];
    let (out, s) = run(&lanes, 0).unwrap();
    let got: Written = out;
    use Order::*;
    assert_eq!(
        got,
        [
            (0, 1, Some(Certain)),   // nothing before it
            (1, 1, Some(Uncertain)), // [11, 15] overlaps [8, 12]
            (0, 2, Some(Certain)),   // 15 < 28
            (1, 2, Some(Certain)),   // 32 < 33
            (1, 3, Some(Certain)),   // same file as the one before; 32 < 34
            (0, 3, Some(Unknown)),
        ]
    );
    assert_eq!((s.certain, s.uncertain, s.unknown), (4, 1, 1));
    assert_eq!(s.records, [3, 3]);
    // A shared end point is a possible tie: not certain.
    let lanes: Lanes = vec![vec![Some((1, Some((0, 5))))], vec![Some((7, Some((5, 9))))]];
    assert_eq!(run(&lanes, 0).unwrap().0[1].2, Some(Uncertain));
}

#[test]
fn local_disorder_is_put_right_and_too_much_is_an_error() {
    let lanes: Lanes = vec![vec![
        Some((5, None)),
        Some((3, None)),
        None,
        Some((9, None)),
        Some((8, None)),
    ]];
    let (out, s) = run(&lanes, 2).unwrap();
    let lines: Vec<u64> = out.iter().map(|o| o.1).collect();
    assert_eq!(lines, [2, 1, 3, 5, 4]);
    assert_eq!((s.reordered, s.untimed), (2, 1));
    // Three records late with a window of one.
    let lanes: Lanes = vec![vec![
        Some((5, None)),
        Some((6, None)),
        Some((7, None)),
        Some((4, None)),
    ]];
    let err = run(&lanes, 1).unwrap_err().to_string();
    assert!(err.starts_with("f0:4: the time 4 comes before"), "{err}");
    assert!(err.contains("--window"), "{err}");
}

/// Sorted lanes of random times and intervals around them.
fn lanes() -> impl Strategy<Value = Lanes> {
    let record = (0i64..1000, 0i64..30, 0i64..30, 0u8..10)
        .prop_map(|(t, a, b, none)| (t, (none > 0).then_some((t - a, t + b))));
    prop::collection::vec(prop::collection::vec(record, 0..30), 1..5).prop_map(|lanes| {
        lanes
            .into_iter()
            .map(|mut l| {
                l.sort_by_key(|r| r.0);
                l.into_iter().map(Some).collect()
            })
            .collect()
    })
}

proptest! {
    /// The verdicts are the definition's, checked against every earlier record.
    #[test]
    fn verdicts_match_the_definition(lanes in lanes()) {
        let (out, s) = run(&lanes, 0).unwrap();
        let record = |(k, line): (usize, u64)| lanes[k][line as usize - 1].unwrap();
        let mut seen: Vec<(usize, Option<(i64, i64)>)> = Vec::new();
        let mut last = i64::MIN;
        for &(k, line, order) in &out {
            let (t, interval) = record((k, line));
            prop_assert!(last <= t);
            last = t;
            let want = match interval {
                None => Order::Unknown,
                Some((lo, _)) => {
                    let all_before = seen
                        .iter()
                        .filter(|p| p.0 != k)
                        .filter_map(|p| p.1)
                        .all(|(_, hi)| hi < lo);
                    if all_before { Order::Certain } else { Order::Uncertain }
                }
            };
            prop_assert_eq!(order, Some(want));
            seen.push((k, interval));
        }
        let total: usize = lanes.iter().map(Vec::len).sum();
        prop_assert_eq!(out.len(), total);
        prop_assert_eq!((s.certain + s.uncertain + s.unknown) as usize, total);
    }
}
