//! `tsync-analyze eval`: how good the correction is, judged by what it implies for the
//! messages (Poirier §3.4.1): per ordered pair, inversions, messages faster than `l_min`, the
//! smallest round trip, transfer-time histograms, and the accuracy interval over time.

use clap::Args;
use tsync_analyze::TimelineOptions;
use tsync_analyze::eval::EvalReport;

use super::{ClcArgs, CmdResult, PlotArgs, SyncArgs};

#[derive(Args)]
pub struct EvalCmd {
    #[command(flatten)]
    pub sync: SyncArgs,
    /// Apply the controlled logical clock after the clock maps.
    #[arg(long)]
    pub clc: bool,
    #[command(flatten)]
    pub clc_params: ClcArgs,
    /// Print the JSON report (docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Minimum message latency (ns) for every pair, instead of half the smallest round trip of
    /// each pair's exchanges.
    #[arg(long, value_name = "NS")]
    pub l_min_ns: Option<f64>,
    #[command(flatten)]
    pub plot: PlotArgs,
}

pub fn run(a: EvalCmd) -> CmdResult {
    a.clc_params.check_used(a.clc)?;
    let plot_samples = a.plot.plot.is_some();
    let (timeline, report) = if a.clc {
        let (timeline, l_min, outcome) =
            super::correct::clc_timeline(&a.sync, &a.clc_params, a.l_min_ns, plot_samples)?;
        let report = timeline.evaluate(l_min, Some(&outcome.corrected), &mut |_| {})?;
        (timeline, report)
    } else {
        let l_min_ns = super::l_min_arg(a.l_min_ns)?;
        let options = TimelineOptions {
            sync: a.sync.options()?,
            keep_messages: false,
            plot_samples,
        };
        let timeline = super::build_timeline(&a.sync, &options)?;
        let report = timeline.evaluate(timeline.l_min(l_min_ns), None, &mut |_| {})?;
        (timeline, report)
    };
    super::print_warnings(&timeline);
    if let Some(dir) = &a.plot.plot {
        super::write_plots(dir, &timeline, Some(&report), &a.plot.formats())?;
    }
    let names: Vec<&str> = timeline
        .inputs
        .traces
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let out = if a.json {
        super::json(&report)?
    } else {
        render(&report, &names)
    };
    super::write_stdout(out.as_bytes())?;
    super::synchronized_enough(&timeline.sync, a.sync.strict)
}

fn opt_ns(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.0}"))
}

/// The human-readable report: one line per ordered pair, then the accuracy per pair.
fn render(r: &EvalReport, names: &[&str]) -> String {
    let mut out = format!(
        "evaluation after the {} correction\n\n{:<24} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12} {:>12}\n",
        if r.clc {
            "clock-map + CLC"
        } else {
            "clock-map"
        },
        "pair",
        "messages",
        "inversions",
        "too fast",
        "l_min ns",
        "min rtt ns",
        "min tt ns",
        "mean tt ns",
    );
    for p in &r.pairs {
        out.push_str(&format!(
            "{:<24} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12.0} {:>12.0}\n",
            format!("{} → {}", names[p.from], names[p.to]),
            p.messages,
            p.inversions,
            p.too_fast,
            opt_ns(p.l_min_ns),
            opt_ns(p.min_rtt_ns),
            p.transfer_ns.min,
            p.transfer_ns.mean,
        ));
    }
    if r.pairs.is_empty() {
        out.push_str("(no matched messages)\n");
    }
    if !r.accuracy.is_empty() {
        out.push_str("\naccuracy interval width (guaranteed, ns)\n");
        for c in &r.accuracy {
            out.push_str(&format!(
                "{:<24} best {:.0}, worst {:.0}, mean {:.0}\n",
                format!("{} ↔ {}", names[c.a], names[c.b]),
                c.curve.stats.best,
                c.curve.stats.worst,
                c.curve.stats.mean
            ));
        }
    }
    out
}
