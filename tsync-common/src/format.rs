//! The tsync trace file format: written by `tsync-agent`, read by `tsync-analyze` (in progress).
