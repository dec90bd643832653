//! What the analyzer gives people and other tools: result files written safely, the `sync`
//! report, plots, and exports of the corrected timeline.

pub mod export;
pub mod figures;
pub mod file;
pub mod plot;
pub mod report;

pub use file::{InputIds, OutputDir, OutputError, OutputFile, describe_io};
