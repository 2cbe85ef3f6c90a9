//! Methods already rewritten by `#[async_trait]`.
//!
//! `#[async_trait]` goes on the `impl` (or the trait), so it runs before the
//! `#[distributed_lock]` on a method inside, and the attribute sees its
//! output rather than the `async fn` the user wrote:
//!
//! ```text
//! fn pay<'life0, 'async_trait>(&'life0 self, id: u64, __arg2: (u8, u8))
//!     -> Pin<Box<dyn Future<Output = Result<(), E>> + Send + 'async_trait>>
//! {
//!     Box::pin(async move {
//!         if let Some(__ret) = None::<Result<(), E>> { return __ret; }
//!         let __self = self;              // `self` in the body is `__self`
//!         let id = id;
//!         let (a, b) = { let __arg2 = __arg2; __arg2 };
//!         let __ret: Result<(), E> = { body };
//!         __ret
//!     })
//! }
//! ```
//!
//! The lock goes inside the boxed future: the statements before
//! `let __ret` (which bind the arguments, patterns included) stay outside
//! the lock, the key is rendered after them, and the rest becomes the
//! locked body. `self` in the key and in `lease`/`wait` expressions is
//! renamed `__self` as in the body.

use proc_macro2::{Group, Ident, TokenStream, TokenTree};
use syn::{
    Block, Expr, FnArg, GenericArgument, ItemFn, Pat, PathArguments, ReturnType, Stmt, Type,
    TypeParamBound,
};

/// A method in `#[async_trait]`'s form, taken apart.
pub(crate) struct AsyncTraitFn {
    /// The `Output` of the boxed future: the method's written return type.
    pub output: Type,
    /// `Box::pin`, as async-trait wrote it.
    pub box_pin: Expr,
    /// The statements that bind the arguments, before `let __ret`.
    pub prologue: Vec<Stmt>,
    /// `let __ret: R = { body }; __ret`: the locked part.
    pub body: Vec<Stmt>,
    /// `__self` with async-trait's span, if the method has a receiver.
    pub renamed_self: Option<Ident>,
}

/// `Some` if `function` is in `#[async_trait]`'s form; `None` if it is not
/// (an `async fn`, or anything else, left to the usual checks); an error if
/// it returns a boxed future like an `#[async_trait]` method but its body
/// is not one.
pub(crate) fn detect(function: &ItemFn) -> syn::Result<Option<AsyncTraitFn>> {
    let sig = &function.sig;
    if sig.asyncness.is_some() {
        return Ok(None);
    }
    let Some(output) = boxed_future_output(&sig.output) else {
        return Ok(None);
    };
    let Some((box_pin, stmts)) = box_pin_async_move(&function.block) else {
        return Err(syn::Error::new_spanned(
            &sig.output,
            "`#[distributed_lock]` needs an `async fn`; this one returns a boxed future, as \
             `#[async_trait]` writes it, but its body is not the \
             `Box::pin(async move { .. })` that `#[async_trait]` generates: write the method \
             as an `async fn` under `#[async_trait]` on the impl, or take the lock inside the \
             future with `lock_runtime::run_locked`",
        ));
    };
    let Some(split) = stmts.iter().position(is_let_ret) else {
        return Err(syn::Error::new_spanned(
            &sig.output,
            "`#[distributed_lock]` does not recognise this `#[async_trait]` output (no \
             `let __ret`): take the lock inside the method with `lock_runtime::run_locked`",
        ));
    };
    let renamed_self = sig.inputs.iter().find_map(|input| match input {
        FnArg::Receiver(receiver) => Some(Ident::new("__self", receiver.self_token.span)),
        FnArg::Typed(_) => None,
    });
    Ok(Some(AsyncTraitFn {
        output,
        box_pin,
        prologue: stmts[..split].to_vec(),
        body: stmts[split..].to_vec(),
        renamed_self,
    }))
}

/// `R` in `Pin<Box<dyn Future<Output = R> + ...>>` (any path to `Pin`,
/// `Box` and `Future`).
fn boxed_future_output(output: &ReturnType) -> Option<Type> {
    let ReturnType::Type(_, ty) = output else {
        return None;
    };
    let boxed = single_generic(ty, "Pin")?;
    let Type::TraitObject(object) = single_generic(boxed, "Box")? else {
        return None;
    };
    object.bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let segment = bound.path.segments.last()?;
        if segment.ident != "Future" {
            return None;
        }
        let PathArguments::AngleBracketed(args) = &segment.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(assoc.ty.clone()),
            _ => None,
        })
    })
}

/// The single type argument of `ty` if it is a path ending in `name<T>`.
fn single_generic<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(path) = ty else {
        return None;
    };
    let segment = path.path.segments.last()?;
    if segment.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &segment.arguments else {
        return None;
    };
    match args.args.first()? {
        GenericArgument::Type(ty) if args.args.len() == 1 => Some(ty),
        _ => None,
    }
}

/// `(Box::pin, stmts)` if `block` is exactly `Box::pin(async move { stmts })`.
fn box_pin_async_move(block: &Block) -> Option<(Expr, Vec<Stmt>)> {
    let [Stmt::Expr(Expr::Call(call), None)] = block.stmts.as_slice() else {
        return None;
    };
    let Expr::Path(func) = &*call.func else {
        return None;
    };
    let names: Vec<String> = func
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    if !names.ends_with(&["Box".to_owned(), "pin".to_owned()]) || call.args.len() != 1 {
        return None;
    }
    match &call.args[0] {
        Expr::Async(future) if future.capture.is_some() => {
            Some(((*call.func).clone(), future.block.stmts.clone()))
        }
        _ => None,
    }
}

/// Whether `stmt` is `let __ret: R = ...;`.
fn is_let_ret(stmt: &Stmt) -> bool {
    let Stmt::Local(local) = stmt else {
        return false;
    };
    match &local.pat {
        Pat::Type(typed) => matches!(&*typed.pat, Pat::Ident(pat) if pat.ident == "__ret"),
        _ => false,
    }
}

/// `tokens` with every `self` replaced by `renamed` (`__self`).
pub(crate) fn rename_self(tokens: TokenStream, renamed: &Ident) -> TokenStream {
    tokens
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Ident(ident) if ident == "self" => TokenTree::Ident(renamed.clone()),
            TokenTree::Group(group) => {
                let mut renamed_group =
                    Group::new(group.delimiter(), rename_self(group.stream(), renamed));
                renamed_group.set_span(group.span());
                TokenTree::Group(renamed_group)
            }
            other => other,
        })
        .collect()
}
