//! The `#[distributed_lock]` attribute. Use it through `lock-runtime`.
use proc_macro::TokenStream;

/// See `lock_runtime::distributed_lock`.
#[proc_macro_attribute]
pub fn distributed_lock(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
