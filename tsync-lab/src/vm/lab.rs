//! A lab run from its options to its verdict: check what the host offers, fetch the kernels and
//! virtme-ng, pick the slew, boot and run the guests ([`super::host`]), compare everything with
//! the truth ([`super::checks`]) and write the report.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use rand::{Rng, SeedableRng};

use super::cache::{self, GuestArch, Kernel, KernelSpec};
use super::checks::{self, LabOutcome};
use super::host;
use super::tscpage::MAX_GUESTS;
use crate::Offloads;

/// Options of the lab.
#[derive(clap::Args, Debug, Clone)]
pub struct LabOptions {
    /// Kernel series (Debian's plain amd64 flavour; `arm64:SERIES` for an arm64 guest under
    /// qemu-system-aarch64), assigned to the guests in turn.
    #[arg(long, value_delimiter = ',', default_value = "6.1,6.12,arm64:6.12")]
    pub kernels: Vec<KernelSpec>,
    /// Number of guests (guest-0 is the reference).
    #[arg(long, default_value_t = 3)]
    pub guests: usize,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 12.0)]
    pub duration: f64,
    /// Seed of the slew (which guest, how much, when); random when absent (printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output folder (default: target/lab/<seed>).
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Segmentation and receive offloads of the guests' NICs: `on` (TSO, GSO, GRO), `off`, or as
    /// the kernel sets them (`kernel`: virtio-net over QEMU's hub has TSO off, GSO and GRO on).
    #[arg(long, value_enum, default_value = "kernel")]
    pub offloads: Offloads,
}

/// The static (dist) binaries guests of one architecture run.
#[derive(Clone, Debug)]
pub struct GuestBinaries {
    /// `tsync-agent`.
    pub agent: PathBuf,
    /// `tsync-lab` built without its `host` feature (the guest program).
    pub lab: PathBuf,
}

/// What the guests run, per architecture (None: not built, no guest of it).
#[derive(Clone, Debug, Default)]
pub struct LabBinaries {
    pub x86_64: Option<GuestBinaries>,
    pub aarch64: Option<GuestBinaries>,
    /// Debian's static busybox for arm64 (the lab fetches it when an arm64 guest runs).
    pub arm64_busybox: Option<PathBuf>,
}

impl LabBinaries {
    /// The binaries on the host's file system for `arch`'s guests.
    pub fn of(&self, arch: GuestArch) -> anyhow::Result<&GuestBinaries> {
        match arch {
            GuestArch::Amd64 => self.x86_64.as_ref(),
            GuestArch::Arm64 => self.aarch64.as_ref(),
        }
        .with_context(|| format!("no {} binaries were built", arch.machine()))
    }

    /// Where `arch`'s guests find them: the host's paths (x86_64 guests mount its root file
    /// system), or the initramfs's (arm64).
    pub fn inside(&self, arch: GuestArch) -> anyhow::Result<GuestBinaries> {
        let built = self.of(arch)?;
        Ok(match arch {
            GuestArch::Amd64 => built.clone(),
            GuestArch::Arm64 => GuestBinaries {
                agent: "/bin/tsync-agent".into(),
                lab: "/bin/tsync-lab".into(),
            },
        })
    }
}

/// The slew a seed picks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlewPlan {
    /// The slewed guest (never the reference, guest-0).
    pub guest: usize,
    /// The frequency change, ppm.
    pub ppm: f64,
    /// Seconds into the traffic.
    pub after: f64,
}

impl SlewPlan {
    /// A guest other than the reference, ±200–500 ppm in whole ppm (exact in adjtimex's 2⁻¹⁶ ppm
    /// units), applied 30–60 % into the traffic.
    pub fn from_seed(seed: u64, guests: usize, duration: f64) -> SlewPlan {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let guest = rng.random_range(1..guests);
        let ppm = rng.random_range(200..=500) as f64 * if rng.random() { 1.0 } else { -1.0 };
        let after = duration * rng.random_range(0.3..0.6);
        SlewPlan { guest, ppm, after }
    }
}

/// A lab about to run: its options checked, its clock started (the report's setup time counts
/// from here, the caller's installs and builds included).
pub struct Lab {
    options: LabOptions,
    /// Where the cache (`lab-cache/`) and the default output (`lab/SEED/`) go.
    target: PathBuf,
    started: Instant,
}

impl Lab {
    /// Checks the options and the host (x86_64, root) and makes Ctrl-C a request to stop; to be
    /// called before installing anything.
    pub fn new(options: LabOptions, target: &Path) -> anyhow::Result<Lab> {
        let started = Instant::now();
        crate::interrupt::catch()?;
        ensure!(
            cfg!(target_arch = "x86_64"),
            "the lab runs on x86_64 hosts only"
        );
        ensure!(
            crate::is_root(),
            "the lab needs root (the guests' agents do not, but installing QEMU does)"
        );
        ensure!(
            (2..=MAX_GUESTS).contains(&options.guests),
            "--guests must be 2 to {MAX_GUESTS}"
        );
        ensure!(!options.kernels.is_empty(), "--kernels names no kernel");
        ensure!(
            options.duration >= 2.0,
            "--duration must be at least 2 s (the slew happens partway)"
        );
        Ok(Lab {
            options,
            target: target.to_owned(),
            started,
        })
    }

    /// Runs the lab: fetches virtme-ng, the kernels (and for an arm64 guest busybox) into the
    /// cache, then asks `build` for the static binaries of the architectures the guests need
    /// (x86_64 guests run them from the host's file system, arm64 guests from their
    /// initramfs), boots the guests, prints the report and `lab: N passed, M failed`, and fails
    /// if any check did.
    pub fn run(
        self,
        build: impl FnOnce(&[GuestArch]) -> anyhow::Result<LabBinaries>,
    ) -> anyhow::Result<()> {
        let o = &self.options;
        let cache_dir = self.target.join("lab-cache");
        let toolkit = cache::Toolkit::ensure(&cache_dir)?;
        let mut kernels = Vec::new();
        for spec in &o.kernels {
            kernels.push(cache::kernel(&cache_dir, spec)?);
        }
        let mut arches: Vec<GuestArch> = kernels.iter().map(|k| k.arch).collect();
        arches.sort_by_key(|a| a.debian());
        arches.dedup();
        let mut binaries = build(&arches)?;
        if arches.contains(&GuestArch::Arm64) {
            binaries.arm64_busybox = Some(cache::arm64_busybox(&cache_dir)?);
        }
        let binaries = &binaries;
        let seed = o.seed.unwrap_or_else(rand::random);
        let out = o
            .out
            .clone()
            .unwrap_or_else(|| self.target.join(format!("lab/{seed}")));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out)
            .with_context(|| format!("cannot create {}", out.display()))?;
        let out = out.canonicalize()?;
        let plan = SlewPlan::from_seed(seed, o.guests, o.duration);
        let assigned: Vec<&Kernel> = (0..o.guests).map(|k| &kernels[k % kernels.len()]).collect();
        eprintln!(
            "lab: seed {seed}; {} guests ({}), {} s of traffic, guest-{} slewed {:+} ppm after \
             {:.1} s; output in {}",
            o.guests,
            assigned
                .iter()
                .map(|k| k.package.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            o.duration,
            plan.guest,
            plan.ppm,
            plan.after,
            out.display()
        );
        let setup_s = self.started.elapsed().as_secs_f64();
        let collected = host::boot_and_run(o, binaries, &toolkit, &assigned, &out, plan)?;
        let run_s = self.started.elapsed().as_secs_f64() - setup_s;
        let outcome = LabOutcome {
            out: &out,
            reports: collected.reports,
            kernels: assigned.iter().map(|k| k.series.clone()).collect(),
            arches: assigned.iter().map(|k| k.arch).collect(),
            slewed: plan.guest,
            slew_ppm: plan.ppm,
            leftovers: collected.leftovers,
        };
        let report = self.report(seed, &outcome, (setup_s, run_s))?;
        std::fs::write(out.join("report.md"), &report.text)?;
        println!("{}", report.text);
        println!(
            "lab: {} passed, {} failed",
            report.checks - report.failed,
            report.failed
        );
        if report.failed > 0 {
            bail!(
                "{} lab check(s) failed; see {}",
                report.failed,
                out.join("report.md").display()
            );
        }
        Ok(())
    }

    /// Evaluates the outcome and writes the report's text (and `sync.json`).
    fn report(
        &self,
        seed: u64,
        outcome: &LabOutcome<'_>,
        (setup_s, run_s): (f64, f64),
    ) -> anyhow::Result<Report> {
        let o = &self.options;
        let out = outcome.out;
        let (rows, checks, sync) = checks::evaluate(outcome);
        let mut text = format!(
            "tsync lab: {} guests under QEMU/TCG, {} s of TCP traffic, seed {seed}\n\n{}\n",
            o.guests,
            o.duration,
            checks::table(&rows)
        );
        if let Some(s) = &sync {
            let m = &s.matching;
            let by_digest = crate::matching::digest_only(&checks::trace_files(out, o.guests))?;
            text.push_str(&format!(
                "matched messages: {} ({} by sequence range) of {} events ({} unmatched, {} \
                 ambiguous); by digest alone: {} matched, {} unmatched; guest NICs' offloads: \
                 {:?} ({})\n",
                m.matched,
                m.range_matched,
                m.events,
                m.unmatched,
                m.ambiguous,
                by_digest.matched,
                by_digest.unmatched,
                o.offloads,
                outcome
                    .reports
                    .first()
                    .and_then(|r| r.as_ref().ok())
                    .map_or("—".into(), |r| r.offloads.join(", "))
            ));
            let json = serde_json::to_string_pretty(&tsync_analyze::output::report::to_json(s))?;
            std::fs::write(out.join("sync.json"), json + "\n")?;
        }
        text.push_str(&format!(
            "time: setup {setup_s:.0} s, guests {run_s:.0} s; output: {}\n\n",
            out.display()
        ));
        for c in &checks {
            text.push_str(&format!(
                "- {} {}: {}\n",
                if c.passed { "PASS" } else { "FAIL" },
                c.name,
                c.detail
            ));
        }
        text.push_str(&agent_checks(outcome));
        Ok(Report {
            text,
            checks: checks.len(),
            failed: checks.iter().filter(|c| !c.passed).count(),
        })
    }
}

/// What `tsync-agent check` printed in each guest, as a user would see it on a node.
fn agent_checks(outcome: &LabOutcome<'_>) -> String {
    let mut text = String::new();
    for (k, r) in outcome.reports.iter().enumerate() {
        let Ok(r) = r else { continue };
        let Some((status, output)) = &r.agent_check else {
            continue;
        };
        text.push_str(&format!(
            "\n`tsync-agent check` on guest-{k} ({} {}): {status}\n\n```text\n{}\n```\n",
            r.arch,
            r.kernel,
            output.trim_end()
        ));
    }
    text
}

/// The report's text and the checks' counts.
struct Report {
    text: String,
    checks: usize,
    failed: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slew_plan_spares_the_reference_and_stays_in_range() {
        for seed in 0..200 {
            let p = SlewPlan::from_seed(seed, 3, 10.0);
            assert!((1..3).contains(&p.guest));
            assert!((200.0..=500.0).contains(&p.ppm.abs()) && p.ppm.fract() == 0.0);
            assert!((3.0..6.0).contains(&p.after));
        }
        assert_eq!(
            SlewPlan::from_seed(7, 3, 10.0),
            SlewPlan::from_seed(7, 3, 10.0)
        );
    }

    #[test]
    fn every_guest_but_the_reference_can_be_slewed() {
        let slewed: std::collections::BTreeSet<usize> = (0..200)
            .map(|seed| SlewPlan::from_seed(seed, 5, 10.0).guest)
            .collect();
        assert_eq!(slewed, (1..5).collect());
    }
}
