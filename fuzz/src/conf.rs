//! dlm.conf text: parsed, then loaded as the daemon does (options, lockspace and fence
//! sections); bad lines must come back as errors or warnings, never a panic.

use dlm_controld::config::{Config, parse_conf};

/// One input.
pub fn run(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    if let Ok(conf) = parse_conf(text) {
        for n in 0..4 {
            let _ = conf.fence_methods(n);
        }
    }
    let _ = Config::load(&[], Some(text));
}
