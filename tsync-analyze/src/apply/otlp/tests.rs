use super::*;

#[test]
fn uncertainty_is_the_widest_side_and_needs_every_interval() {
    let m = |t, i| Mapped {
        t_ns: t,
        interval: i,
        outside_span: false,
    };
    let a = m(100, Some((90, 103)));
    let b = m(200, Some((198, 215)));
    assert_eq!(uncertainty([&a, &b].into_iter()), Some(15));
    let c = m(300, None);
    assert_eq!(uncertainty([&a, &c].into_iter()), None);
}
