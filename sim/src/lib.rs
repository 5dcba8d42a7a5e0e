//! # rebound-sim
//!
//! Virtual-clock driver, scripted providers and tools, fault scenarios, and trace record and
//! replay for [`rebound_core`]'s agent machine.
