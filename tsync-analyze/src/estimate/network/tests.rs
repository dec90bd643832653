//! The grid's bounds against the exact ones on small meshes: never tighter (they are sums of the
//! same constraints along some path), equal at the grid's instants, and close in between.

use super::*;
use crate::model::Message;
use crate::{SyncOptions, sync_messages};
use tsync_sim::Workload;

fn run(w: &Workload) -> SyncResult {
    let mut v = Vec::new();
    w.generate(|m, _| {
        v.push(Message {
            send_trace: m.send_trace,
            recv_trace: m.recv_trace,
            send_ns: m.send_ns,
            recv_ns: m.recv_ns,
        })
    });
    let names: Vec<String> = (0..w.clocks.len()).map(|i| i.to_string()).collect();
    sync_messages(&names, v, &SyncOptions::default(), Some(0))
}

#[test]
fn the_grid_equals_the_exact_solution_at_its_instants_and_never_undercuts_it() {
    for (traces, seed) in [(6, 1), (10, 2), (16, 3)] {
        let mut w = Workload::sparse(traces, 4, 0, seed);
        w.messages = 400 * w.links.len() as u64;
        let r = run(&w);
        let layout = r.network.layout(&r);
        let plan = plan::Plan::new(&r, &r.inverses, layout, 0, 2).expect("a span");
        let root = layout.local[0] as usize;
        let exact = |at_ref: f64, k: usize| {
            let i = Instant::solve(&r, &r.inverses, layout, 0, at_ref, root).expect("no cycle");
            (i.up.dist[k], i.down.dist[k])
        };
        let (lo, hi) = plan.span();
        let (mut checked, mut close) = (0, 0);
        for step in 0..=64 {
            let at_ref = lo + (hi - lo) * step as f64 / 64.0;
            let on_grid = step % (64 / (GRID - 1)) == 0;
            for k in 1..traces {
                let (up, down) = exact(at_ref, k);
                let Some(b) = plan.bounds(&r, &r.inverses, layout, k, at_ref) else {
                    assert!(!up.is_finite() || !down.is_finite(), "{traces} traces, {k}");
                    continue;
                };
                checked += 1;
                let tol = |v: f64| 1e-6 * (1.0 + v.abs());
                assert!(b.up >= up - tol(up) && b.down >= down - tol(down));
                if on_grid {
                    assert!(
                        (b.up - up).abs() <= tol(up),
                        "{traces} traces, {k} at {step}"
                    );
                    assert!((b.down - down).abs() <= tol(down));
                }
                if b.up - up <= 1.0 && b.down - down <= 1.0 {
                    close += 1;
                }
            }
        }
        assert!(checked > 0);
        assert!(
            close * 10 >= checked * 9,
            "{close} of {checked} within 1 ns"
        );
    }
}
