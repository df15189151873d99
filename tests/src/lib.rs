//! `dlm-tests`: the fake kernel (library and `fake_kernel` binary); the multi-node
//! simulator and the cluster tests arrive with the cluster issue.

pub mod fake_kernel;

pub use fake_kernel::{FakeKernel, Record};

/// A network namespace made for one test and deleted when dropped, so that daemons of
/// parallel tests do not meet on the abstract sockets `\0dlmc_query_sock` and `\0dlmc_sock`.
#[derive(Debug)]
pub struct Netns(pub String);

impl Netns {
    /// Creates `dlmt-<tag>-<pid>` with its loopback up.
    pub fn new(tag: &str) -> std::io::Result<Self> {
        let name = format!("dlmt-{tag}-{}", std::process::id());
        let run = |args: &[&str]| -> std::io::Result<()> {
            let ok = std::process::Command::new("ip")
                .args(args)
                .status()?
                .success();
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::other(format!("ip {args:?} failed")))
            }
        };
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(std::process::Stdio::null())
            .status();
        run(&["netns", "add", &name])?;
        run(&["-n", &name, "link", "set", "lo", "up"])?;
        Ok(Self(name))
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> std::process::Command {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}
