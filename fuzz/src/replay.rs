//! Replaying `fuzz/regressions/<target>/` through the targets' bodies, for floe's ordinary
//! tests (which include this file, `std` only, with `#[path]`).

use std::path::Path;

/// A target's body: it takes the raw input, and panics when a property fails.
type Body = fn(&[u8]);

/// Feeds every file of `regressions/<name>/` to its target's body, for each of `targets`, and
/// fails naming every file whose body panicked. A target with no folder, or an empty one,
/// fails too: its inputs would be skipped without a word.
pub fn replay(regressions: &Path, targets: &[(&str, Body)]) {
    let mut failed = Vec::new();
    for &(name, body) in targets {
        let dir = regressions.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no inputs", dir.display());
        for file in files {
            let input = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let run = std::panic::AssertUnwindSafe(|| body(&input));
            if std::panic::catch_unwind(run).is_err() {
                failed.push(file.display().to_string());
            }
        }
    }
    assert!(
        failed.is_empty(),
        "failed (see the panics above): {failed:#?}"
    );
}
