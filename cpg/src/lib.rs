//! `dlm-cpg`: corosync process groups for dlm_controld — opaque byte payloads and
//! membership, never parsed here.
//!
//! Not written yet: the corosync bindings, the embedded single-node group and the simulated
//! bus arrive with the cpg issue.
