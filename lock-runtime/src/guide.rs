//! Guides that span several items: read them as chapters.

#[doc = include_str!("guide/fencing.md")]
pub mod fencing {}
