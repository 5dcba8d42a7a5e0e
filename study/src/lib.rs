#![doc = include_str!("../README.md")]
// The README's code blocks are doc tests (the crate's front page on docs.rs and crates.io
// cannot rot), and no doc test may warn: an example that warns teaches the warning.
#![doc(test(attr(deny(warnings))))]
#![forbid(unsafe_code)]
// On docs.rs (`--cfg docsrs`, Cargo.toml): each item behind a feature names the feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

#[cfg(feature = "charts")]
pub mod charts;
pub mod compare;
