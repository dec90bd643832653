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
/// which nothing here needs) for x86_64 guests and, `qemu-system-arm`, for the arm64 guest,
/// `depmod` and busybox (virtme-ng builds its initramfs with them), xz (the arm64 guest's kernel modules are unpacked for busybox's
/// `insmod`).
pub const DEBIAN_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "qemu-system-arm",
    "kmod",
    "busybox-static",
    "xz-utils",
];
/// The foreign Debian architecture the arm64 guest's kernel and busybox come from (`dpkg
/// --add-architecture`, which xtask's setup runs).
pub const FOREIGN_ARCH: &str = "arm64";
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

/// A guest's architecture: Debian's name for it, in the kernel packages' names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestArch {
    /// x86_64: virtme-ng boots it with the host's root file system.
    Amd64,
    /// aarch64: QEMU boots it with an initramfs of its own ([`super::initramfs`]).
    Arm64,
}

impl GuestArch {
    /// Debian's name (`amd64`, `arm64`).
    pub fn debian(self) -> &'static str {
        match self {
            GuestArch::Amd64 => "amd64",
            GuestArch::Arm64 => "arm64",
        }
    }

    /// `uname -m`, and the Rust architecture the guest's binaries are built for.
    pub fn machine(self) -> &'static str {
        match self {
            GuestArch::Amd64 => "x86_64",
            GuestArch::Arm64 => "aarch64",
        }
    }
}

/// What `--kernels` names: a series, optionally for arm64 (`6.12`, `arm64:6.12`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSpec {
    pub arch: GuestArch,
    pub series: String,
}

impl std::str::FromStr for KernelSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<KernelSpec, String> {
        let (arch, series) = match s.split_once(':') {
            None => (GuestArch::Amd64, s),
            Some(("amd64" | "x86_64", series)) => (GuestArch::Amd64, series),
            Some(("arm64" | "aarch64", series)) => (GuestArch::Arm64, series),
            Some((other, _)) => return Err(format!("{other:?} is not amd64 or arm64")),
        };
        package_prefix(series).map_err(|e| e.to_string())?;
        Ok(KernelSpec {
            arch,
            series: series.to_owned(),
        })
    }
}

impl std::fmt::Display for KernelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.arch {
            GuestArch::Amd64 => write!(f, "{}", self.series),
            GuestArch::Arm64 => write!(f, "arm64:{}", self.series),
        }
    }
}

/// A kernel ready to boot: its image inside the unpacked package (modules beside it).
#[derive(Clone, Debug)]
pub struct Kernel {
    pub arch: GuestArch,
    /// The series asked for (`6.1`).
    pub series: String,
    /// The Debian package it came from.
    pub package: String,
    pub image: PathBuf,
}

/// The newest cached kernel of the series, or the newest Debian has, downloaded and unpacked into
/// the cache folder.
pub fn kernel(cache_dir: &Path, spec: &KernelSpec) -> anyhow::Result<Kernel> {
    let dir = cache_dir.join("kernels");
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let prefix = package_prefix(&spec.series)?;
    let flavour = Flavour {
        prefix: &prefix,
        arch: spec.arch.debian(),
    };
    let package = match newest_cached(&dir, flavour)? {
        Some(p) => p,
        None => {
            let p = newest_package(flavour)?;
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
        arch: spec.arch,
        series: spec.series.clone(),
        package,
        image,
    })
}

impl Kernel {
    /// The unpacked package's module tree (`lib/modules/RELEASE`).
    pub fn modules(&self) -> anyhow::Result<PathBuf> {
        let root = self
            .image
            .parent()
            .and_then(Path::parent)
            .context("the kernel image has no package folder")?
            .join("lib/modules");
        fs::read_dir(&root)
            .with_context(|| format!("cannot list {}", root.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .next()
            .with_context(|| format!("no module tree in {}", root.display()))
    }
}

/// Debian's static busybox for arm64 (`busybox-static:arm64`), downloaded and unpacked into the
/// cache folder once: the arm64 guest's shell and tools. Its path.
pub fn arm64_busybox(cache_dir: &Path) -> anyhow::Result<PathBuf> {
    let package = "busybox-static:arm64";
    let dir = cache_dir.join("busybox-static-arm64");
    let binary = dir.join("bin/busybox");
    if !dir.join(".complete").exists() {
        unpack_as(&dir, package).with_context(|| {
            format!(
                "cannot fetch {package} (is arm64 a dpkg architecture here? `cargo xtask setup` \
                 adds it: dpkg --add-architecture arm64, apt-get update)"
            )
        })?;
    }
    Ok(binary)
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

/// Which packages count: a series' prefix and Debian's architecture.
#[derive(Clone, Copy)]
struct Flavour<'a> {
    prefix: &'a str,
    arch: &'a str,
}

/// The plain `-amd64` (`-arm64`) flavour, unsigned (the `-cloud-` flavour has no 9p; `-rt-` is
/// another kernel).
fn is_plain_image(name: &str, f: Flavour<'_>) -> bool {
    name.starts_with(f.prefix)
        && name.ends_with(&format!("-{}-unsigned", f.arch))
        && !name.contains("-cloud-")
        && !name.contains("-rt-")
}

/// The newest package of the series unpacked completely in `dir` (an interrupted unpack has no
/// `.complete` marker and does not count).
fn newest_cached(dir: &Path, flavour: Flavour<'_>) -> anyhow::Result<Option<String>> {
    Ok(fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| is_plain_image(n, flavour) && dir.join(n).join(".complete").exists())
        .max_by(|a, b| natural_cmp(a, b)))
}

/// The newest plain image package of the series in `apt-cache search` output (`NAME - TEXT`
/// lines).
fn newest_listed(listing: &str, flavour: Flavour<'_>) -> Option<String> {
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| is_plain_image(n, flavour))
        .map(str::to_owned)
        .max_by(|a, b| natural_cmp(a, b))
}

/// The newest plain image package of the series that apt knows (after one `apt-get update` if
/// it knows none).
fn newest_package(flavour: Flavour<'_>) -> anyhow::Result<String> {
    let search = || {
        let pattern = format!("^{}", flavour.prefix.replace('.', "\\."));
        let listing = output(Command::new("apt-cache").args(["search", "--names-only", &pattern]));
        newest_listed(&listing.unwrap_or_default(), flavour)
    };
    if let Some(p) = search() {
        return Ok(p);
    }
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["update", "-q"]))?;
    search().with_context(|| {
        format!(
            "Debian offers no {}*-{}-unsigned package (apt-cache search)",
            flavour.prefix, flavour.arch
        )
    })
}

/// Downloads `package` and unpacks it into `dir/package` (marked complete last, so an
/// interrupted unpack is redone).
fn unpack(dir: &Path, package: &str) -> anyhow::Result<()> {
    unpack_as(&dir.join(package), package)
}

/// Downloads `package` and unpacks it into `target` (marked complete last).
fn unpack_as(target: &Path, package: &str) -> anyhow::Result<()> {
    eprintln!(
        "lab: downloading and unpacking {package} into {}",
        target.display()
    );
    let work = PathBuf::from(format!("{}.download", target.display()));
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
    let _ = fs::remove_dir_all(target);
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(target))?;
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

    fn amd64(prefix: &str) -> Flavour<'_> {
        Flavour {
            prefix,
            arch: "amd64",
        }
    }

    #[test]
    fn kernel_specs_name_an_architecture_or_default_to_amd64() {
        let s: KernelSpec = "arm64:6.12".parse().unwrap();
        assert_eq!((s.arch, s.series.as_str()), (GuestArch::Arm64, "6.12"));
        assert_eq!(s.to_string(), "arm64:6.12");
        let s: KernelSpec = "6.1".parse().unwrap();
        assert_eq!((s.arch, s.series.as_str()), (GuestArch::Amd64, "6.1"));
        assert!("riscv64:6.12".parse::<KernelSpec>().is_err());
        assert!("arm64:6".parse::<KernelSpec>().is_err());
    }

    #[test]
    fn picks_the_plain_flavour_of_the_series() {
        let prefix = package_prefix("6.1").unwrap();
        let p = amd64(&prefix);
        assert!(is_plain_image("linux-image-6.1.0-56-amd64-unsigned", p));
        assert!(!is_plain_image(
            "linux-image-6.1.0-56-cloud-amd64-unsigned",
            p
        ));
        assert!(!is_plain_image("linux-image-6.1.0-56-rt-amd64-unsigned", p));
        assert!(!is_plain_image(
            "linux-image-6.12.117+deb12-amd64-unsigned",
            p
        ));
        let prefix = package_prefix("6.12").unwrap();
        let p = amd64(&prefix);
        assert!(is_plain_image(
            "linux-image-6.12.117+deb12-amd64-unsigned",
            p
        ));
        let arm = Flavour {
            prefix: &prefix,
            arch: "arm64",
        };
        assert!(is_plain_image(
            "linux-image-6.12.117+deb12-arm64-unsigned",
            arm
        ));
        assert!(!is_plain_image(
            "linux-image-6.12.117+deb12-amd64-unsigned",
            arm
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
        let prefix = package_prefix("6.1").unwrap();
        let p = amd64(&prefix);
        assert_eq!(
            newest_listed(listing, p).as_deref(),
            Some("linux-image-6.1.0-56-amd64-unsigned")
        );
        let prefix = package_prefix("6.12").unwrap();
        let p = amd64(&prefix);
        assert_eq!(
            newest_listed(listing, p).as_deref(),
            Some("linux-image-6.12.117+deb12-amd64-unsigned")
        );
        assert_eq!(newest_listed("", p), None);
    }

    #[test]
    fn only_complete_unpacks_count_as_cached() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = package_prefix("6.1").unwrap();
        let p = amd64(&prefix);
        assert_eq!(newest_cached(dir.path(), p).unwrap(), None);
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
            newest_cached(dir.path(), p).unwrap().as_deref(),
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
            newest_cached(dir.path(), p).unwrap().as_deref(),
            Some("linux-image-6.1.0-56-amd64-unsigned")
        );
    }
}
