//! The `#[distributed_lock]` attribute. Use it through `lock-runtime`, which
//! re-exports it and documents its options.
//!
//! The attribute turns an `async fn` returning `Result<T, E>` (with
//! `E: From<LockError>`) into one that renders its lock key from the
//! arguments, then runs the original body under that lock. All checks that can
//! be made at compile time (the key template, durations, the kind of lock,
//! the function's shape) are made here, with errors on the offending token.
#![warn(missing_docs)]

mod args;
mod async_trait;
mod duration;
mod expand;
mod key;
mod kind;

use proc_macro::TokenStream;

// The attribute's whole documentation, shown by rustdoc (also where
// `lock-runtime` re-exports it) and by IDE hover. Its examples need
// `lock-runtime`, so they run as doctests of that crate.
#[doc = include_str!("attribute.md")]
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}
