//! What the lab needs besides the workspace, set up idempotently: Debian's QEMU (and the tools
//! virtme-ng calls: [`DEBIAN_PACKAGES`], which xtask installs), virtme-ng from PyPI, and Debian's
//! kernels — downloaded as packages and unpacked into the cache folder (`target/lab-cache/`),
//! never installed on the host.
//!
//! A second run finds everything in place and asks no registry: a kernel series already in the
//! cache is used as cached (its newest), so CI downloads each kernel once per machine.
use std::cmp::Ordering;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::command::{output, run};

/// Debian packages the lab runs: QEMU (7.2 on bookworm; it replaces a preinstalled `qemu-utils`,
/// which nothing here needs), `depmod` and busybox (virtme-ng builds its initramfs with them),
/// ethtool (the guests report their NIC's offloads).
pub const DEBIAN_PACKAGES: &[&str] = &["qemu-system-x86", "kmod", "busybox-static", "ethtool"];
/// The virtme-ng release the lab was measured with.
const VIRTME_NG: &str = "virtme-ng==1.42";

/// virtme-ng, installed into the cache.
pub struct Toolkit {
    dir: PathBuf,
}

impl Toolkit {
    /// Installs virtme-ng into the cache folder with pip unless it is there.
    pub fn ensure(cache_dir: &Path) -> anyhow::Result<Toolkit> {
        let dir = cache_dir.join("virtme-ng");
        if !dir.join("bin/vng").exists() {
            eprintln!("lab: installing {VIRTME_NG} into {}", dir.display());
            let tmp = dir.with_extension("tmp");
            let _ = fs::remove_dir_all(&tmp);
            run(Command::new("python3")
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(["--no-warn-script-location", "--target"])
                .arg(&tmp)
                .arg(VIRTME_NG))
            .context("cannot install virtme-ng with pip (python3 and pip are needed)")?;
            let _ = fs::remove_dir_all(&dir);
            fs::rename(&tmp, &dir)?;
        }
        Ok(Toolkit { dir })
    }

    /// A `vng` command (its Python package on PYTHONPATH, its helper scripts on PATH).
    pub fn vng(&self) -> Command {
        let mut cmd = Command::new(self.dir.join("bin/vng"));
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![self.dir.join("bin")];
        paths.extend(std::env::split_paths(&path));
        cmd.env("PYTHONPATH", &self.dir)
            .env("PATH", std::env::join_paths(paths).expect("valid PATH"));
        cmd
    }
}

/// A kernel ready to boot: its image inside the unpacked package (modules beside it).
#[derive(Clone, Debug)]
pub struct Kernel {
    /// The series asked for (`6.1`).
    pub series: String,
    /// The Debian package it came from.
    pub package: String,
    pub image: PathBuf,
}

/// The newest cached kernel of `series`, or the newest Debian has, downloaded and unpacked into
/// the cache folder.
pub fn kernel(cache_dir: &Path, series: &str) -> anyhow::Result<Kernel> {
    let dir = cache_dir.join("kernels");
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let prefix = package_prefix(series)?;
    let package = match newest_cached(&dir, &prefix)? {
        Some(p) => p,
        None => {
            let p = newest_package(&prefix)?;
            unpack(&dir, &p)?;
            p
        }
    };
    let boot = dir.join(&package).join("boot");
    let image = fs::read_dir(&boot)
        .with_context(|| format!("cannot list {}", boot.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .with_context(|| format!("no vmlinuz in {}", boot.display()))?;
    Ok(Kernel {
        series: series.to_owned(),
        package,
        image,
    })
}

/// `linux-image-6.1.` for `6.1`: the start of every plain image package of that series.
fn package_prefix(series: &str) -> anyhow::Result<String> {
    let ok = series.split('.').count() == 2
        && series
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !ok {
        bail!("--kernels: {series:?} is not a kernel series like 6.1 or 6.12");
    }
    Ok(format!("linux-image-{series}."))
}

/// The plain `-amd64` flavour, unsigned (the `-cloud-` flavour has no 9p; `-rt-` is another
/// kernel).
fn is_plain_image(name: &str, prefix: &str) -> bool {
    name.starts_with(prefix)
        && name.ends_with("-amd64-unsigned")
        && !name.contains("-cloud-")
        && !name.contains("-rt-")
}

/// The newest package of the series unpacked completely in `dir` (an interrupted unpack has no
/// `.complete` marker and does not count).
fn newest_cached(dir: &Path, prefix: &str) -> anyhow::Result<Option<String>> {
    Ok(fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| is_plain_image(n, prefix) && dir.join(n).join(".complete").exists())
        .max_by(|a, b| natural_cmp(a, b)))
}

/// The newest plain image package of the series in `apt-cache search` output (`NAME - TEXT`
/// lines).
fn newest_listed(listing: &str, prefix: &str) -> Option<String> {
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| is_plain_image(n, prefix))
        .map(str::to_owned)
        .max_by(|a, b| natural_cmp(a, b))
}

/// The newest plain image package of the series that apt knows (after one `apt-get update` if
/// it knows none).
fn newest_package(prefix: &str) -> anyhow::Result<String> {
    let search = || {
        let pattern = format!("^{}", prefix.replace('.', "\\."));
        let listing = output(Command::new("apt-cache").args(["search", "--names-only", &pattern]));
        newest_listed(&listing.unwrap_or_default(), prefix)
    };
    if let Some(p) = search() {
        return Ok(p);
    }
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["update", "-q"]))?;
    search().with_context(|| {
        format!("Debian offers no {prefix}*-amd64-unsigned package (apt-cache search)")
    })
}

/// Downloads `package` and unpacks it into `dir/package` (marked complete last, so an
/// interrupted unpack is redone).
fn unpack(dir: &Path, package: &str) -> anyhow::Result<()> {
    eprintln!(
        "lab: downloading and unpacking {package} into {}",
        dir.display()
    );
    let work = dir.join(format!("{package}.download"));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    run(Command::new("apt-get").current_dir(&work).args([
        "-q",
        "-o",
        "APT::Sandbox::User=root",
        "download",
        package,
    ]))
    .with_context(|| format!("cannot download {package}"))?;
    let deb = fs::read_dir(&work)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .with_context(|| format!("apt-get download left no .deb for {package}"))?;
    let target = dir.join(package);
    let _ = fs::remove_dir_all(&target);
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&target))?;
    fs::remove_dir_all(&work)?;
    fs::write(target.join(".complete"), "")?;
    Ok(())
}

/// Orders names with their digit runs compared as numbers (`6.1.0-9` < `6.1.0-56`).
fn natural_cmp(a: &str, b: &str) -> Ordering {
    fn parts(s: &str) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        let mut rest = s;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 {
                out.push((rest[..digits].parse().unwrap_or(u64::MAX), String::new()));
                rest = &rest[digits..];
            } else {
                let n = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
                out.push((0, rest[..n].to_owned()));
                rest = &rest[n..];
            }
        }
        out
    }
    parts(a).cmp(&parts(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_plain_flavour_of_the_series() {
        let p = package_prefix("6.1").unwrap();
        assert!(is_plain_image("linux-image-6.1.0-56-amd64-unsigned", &p));
        assert!(!is_plain_image(
            "linux-image-6.1.0-56-cloud-amd64-unsigned",
            &p
        ));
        assert!(!is_plain_image(
            "linux-image-6.1.0-56-rt-amd64-unsigned",
            &p
        ));
        assert!(!is_plain_image(
            "linux-image-6.12.117+deb12-amd64-unsigned",
            &p
        ));
        let p = package_prefix("6.12").unwrap();
        assert!(is_plain_image(
            "linux-image-6.12.117+deb12-amd64-unsigned",
            &p
        ));
        assert!(package_prefix("6").is_err() && package_prefix("6.x").is_err());
    }

    #[test]
    fn newest_is_by_number_not_by_text() {
        assert_eq!(
            natural_cmp("6.1.0-9-amd64", "6.1.0-56-amd64"),
            Ordering::Less
        );
        assert_eq!(
            natural_cmp("6.12.107+deb12", "6.12.117+deb12"),
            Ordering::Less
        );
        assert_eq!(natural_cmp("a-1", "a-1"), Ordering::Equal);
    }

    #[test]
    fn the_newest_listed_package_is_a_plain_image_of_the_series() {
        let listing = "\
linux-image-6.1.0-9-amd64-unsigned - Linux 6.1 for 64-bit PCs
linux-image-6.1.0-56-amd64-unsigned - Linux 6.1 for 64-bit PCs
linux-image-6.1.0-57-cloud-amd64-unsigned - Linux 6.1 for x86-64 cloud
linux-image-6.1.0-58-rt-amd64-unsigned - Linux 6.1 for 64-bit PCs, PREEMPT_RT
linux-image-6.12.117+deb12-amd64-unsigned - Linux 6.12 for 64-bit PCs
";
        let p = package_prefix("6.1").unwrap();
        assert_eq!(
            newest_listed(listing, &p).as_deref(),
            Some("linux-image-6.1.0-56-amd64-unsigned")
        );
        let p = package_prefix("6.12").unwrap();
        assert_eq!(
            newest_listed(listing, &p).as_deref(),
            Some("linux-image-6.12.117+deb12-amd64-unsigned")
        );
        assert_eq!(newest_listed("", &p), None);
    }

    #[test]
    fn only_complete_unpacks_count_as_cached() {
        let dir = tempfile::tempdir().unwrap();
        let p = package_prefix("6.1").unwrap();
        assert_eq!(newest_cached(dir.path(), &p).unwrap(), None);
        for (name, complete) in [
            ("linux-image-6.1.0-9-amd64-unsigned", true),
            ("linux-image-6.1.0-56-amd64-unsigned", false),
            ("linux-image-6.1.0-56-amd64-unsigned.download", false),
        ] {
            fs::create_dir_all(dir.path().join(name)).unwrap();
            if complete {
                fs::write(dir.path().join(name).join(".complete"), "").unwrap();
            }
        }
        assert_eq!(
            newest_cached(dir.path(), &p).unwrap().as_deref(),
            Some("linux-image-6.1.0-9-amd64-unsigned")
        );
        fs::write(
            dir.path()
                .join("linux-image-6.1.0-56-amd64-unsigned")
                .join(".complete"),
            "",
        )
        .unwrap();
        assert_eq!(
            newest_cached(dir.path(), &p).unwrap().as_deref(),
            Some("linux-image-6.1.0-56-amd64-unsigned")
        );
    }
}
