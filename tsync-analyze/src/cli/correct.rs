//! `tsync-analyze correct`: the clock maps of `sync`, then the controlled logical clock
//! over all traces' events; prints what the clock changed (the `correct --json` report).

use clap::Args;
use tsync_analyze::clc::{ClcOutcome, ClcReport, PairLatency};
use tsync_analyze::{Timeline, TimelineOptions};

use super::{ClcArgs, CliError, CmdResult, SyncArgs};

#[derive(Args)]
pub struct CorrectCmd {
    #[command(flatten)]
    pub sync: SyncArgs,
    /// Print the JSON report (docs/json.md).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub clc: ClcArgs,
    /// Minimum message latency (ns) for every pair, instead of half the smallest round trip of
    /// each pair's exchanges (0 only forbids inversions).
    #[arg(long, value_name = "NS")]
    pub l_min_ns: Option<f64>,
}

/// Builds the timeline with the messages kept and runs the CLC on the linear times: the common
/// start of `correct`, `eval --clc` and `export --clc`.
pub fn clc_timeline(
    sync: &SyncArgs,
    clc: &ClcArgs,
    l_min_ns: Option<f64>,
    plot_samples: bool,
) -> Result<(Timeline, PairLatency, ClcOutcome), CliError> {
    let l_min_ns = super::l_min_arg(l_min_ns)?;
    let options = TimelineOptions {
        sync: sync.options()?,
        keep_messages: true,
        plot_samples,
    };
    let mut timeline = super::build_timeline(sync, &options)?;
    let times = timeline.mapped_times()?;
    let l_min = timeline.l_min(l_min_ns);
    let outcome = timeline.run_clc(times, &l_min, &clc.params())?;
    Ok((timeline, l_min, outcome))
}

pub fn run(a: CorrectCmd) -> CmdResult {
    let (timeline, _, outcome) = clc_timeline(&a.sync, &a.clc, a.l_min_ns, false)?;
    super::print_warnings(&timeline);
    let out = if a.json {
        super::json(&outcome.report)?
    } else {
        render(&outcome.report)
    };
    super::write_stdout(out.as_bytes())?;
    super::synchronized_enough(&timeline.sync, a.sync.strict)
}

/// The human-readable report.
fn render(r: &ClcReport) -> String {
    let pct = |x: f64| format!("{:.4} %", x * 100.0);
    let d = &r.interval_deviation_share;
    format!(
        "controlled logical clock (γ = {}, ρ = {}, δ = {} ns)\n\
         \x20 events              {}\n\
         \x20 messages            {}\n\
         \x20 violations before   {} (t_recv < t_send + l_min), {} received before sent\n\
         \x20 violations after    {}\n\
         \x20 corrected receives  {} explicitly, {} events moved\n\
         \x20 displacement        mean {:.1} ns, max {:.1} ns\n\
         \x20 intervals changed   > 0.01 %: {}, > 1 %: {}, > 100 %: {}\n",
        r.gamma,
        r.rho,
        r.delta_ns,
        r.events,
        r.messages,
        r.violations_before,
        r.reversed_before,
        r.violations_after,
        r.corrected_explicitly,
        r.events_moved,
        r.displacement_ns.mean,
        r.displacement_ns.max,
        pct(d.gt_0_01_pct),
        pct(d.gt_1_pct),
        pct(d.gt_100_pct),
    )
}
