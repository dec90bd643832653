//! The NICs' segmentation and receive offloads (TSO, GSO, GRO), which the demo and the VM lab can
//! turn on or off: they decide how sends and receives are cut into the events the analyzer pairs.

/// The `--offloads` choices.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offloads {
    On,
    Off,
    /// As the kernel set them.
    Kernel,
}

impl Offloads {
    /// The state to give `ethtool -K DEV tso S gso S gro S`, or None to leave the kernel's.
    pub fn ethtool_state(self) -> Option<&'static str> {
        match self {
            Offloads::On => Some("on"),
            Offloads::Off => Some("off"),
            Offloads::Kernel => None,
        }
    }
}
