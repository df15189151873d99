//! Replays `seeds/<target>/*` through each harness (an ordinary test: no libFuzzer). The
//! seeds are a minimised corpus of fuzzing runs plus every input that once failed.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = e.expect("entry").path();
        let bytes = std::fs::read(&path).expect("seed");
        run(&bytes);
        n += 1;
    }
    assert!(n > 0, "no seeds in {}", dir.display());
}

#[test]
fn wire_seeds() {
    replay("wire", dlm_fuzz::wire::run);
}

#[test]
fn plock_model_seeds() {
    replay("plock_model", dlm_fuzz::plock_model::run);
}

#[test]
fn lscore_seeds() {
    replay("lscore", dlm_fuzz::lscore::run);
}

#[test]
fn conf_seeds() {
    replay("conf", dlm_fuzz::conf::run);
}
