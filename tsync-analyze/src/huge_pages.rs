//! Transparent huge pages for the few large buffers that are written whole as soon as they are
//! allocated (the matcher's ring of live keys): each first write of a 4 KiB page is a page fault,
//! and a ring of megabytes is thousands of them, on the thread every event goes through. In 2 MiB
//! pages the same ring faults a few times. Most distributions only give huge pages to memory
//! that asks for them (`/sys/kernel/mm/transparent_hugepage/enabled` set to `madvise`).

/// The size of a huge page on x86_64 and on arm64 with 4 KiB pages. Elsewhere the advice covers
/// less than it could, or nothing: it stays a hint.
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the whole huge pages inside `bytes` bytes from `start` with huge pages
/// (a hint: no effect on results; ignored where huge pages are off or unknown).
pub(crate) fn advise<T>(start: *const T, bytes: usize) {
    let first = (start as usize).next_multiple_of(HUGE_PAGE);
    let end = (start as usize).saturating_add(bytes) / HUGE_PAGE * HUGE_PAGE;
    if end <= first {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: `madvise(MADV_HUGEPAGE)` only changes how the kernel backs the pages of a range
    // the caller owns (whole pages inside its allocation): it moves, frees and changes no byte.
    // An error (huge pages disabled, an old kernel) leaves the pages as they were.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
}
