//! Links the corosync client libraries (Debian: libcpg-dev libquorum-dev libcfg-dev
//! libcmap-dev) by their plain names, as pkg-config reports them on Debian 12.
fn main() {
    for lib in ["cpg", "quorum", "cfg", "cmap"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
