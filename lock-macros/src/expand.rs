//! Checks the function and generates the locked version of it.
//!
//! ```text
//! Input:  #[distributed_lock(key = "order:<id>", lease = "30s", wait = self.wait)]
//!         pub async fn pay(&self, id: u64) -> Result<(), E> { body }
//! Output: pub async fn pay(&self, id: u64) -> Result<(), E> {
//!             let __key = ::lock_runtime::__private::key(
//!                 ::core::format_args!("order:{}", ::lock_runtime::__private::shown(&id)));
//!             let __options = ::lock_runtime::__private::options(Some(30000), None, true)
//!                 .label("order:<id>")
//!                 .wait(::lock_runtime::__private::duration(self.wait));
//!             let __locked = ::lock_runtime::__private::run_locked(
//!                 __key,
//!                 __options,
//!                 async move { let __ret: Result<(), E> = { body }; __ret },
//!             );
//!             ::lock_runtime::__private::finish(__locked.await)
//!         }
//! ```
//!
//! `shown` only wraps a `Display` value (`<id:?>` passes `id` to `{:?}`
//! as it is); its bound carries the message for a value that is not
//! `Display`. `duration` takes a `Duration` or `&Duration`, with a message
//! for anything else. The label is the template as written, never the
//! rendered key, so that metrics and spans have few distinct labels.
//!
//! The runtime renders the key (with the client's prefix, into one `String`)
//! in a statement of its own, borrowing the arguments, and only then does
//! `async move` take them for the body. Passing `format_args!("order:{}", id)`
//! straight to `run_locked` would hold a borrow of `id` while the body moves
//! it (an error for any argument that is not `Copy`, or for `self.field` with
//! a `self` or `&mut self` receiver), and its temporaries would make the
//! future `!Send` if the `.await` were in the same statement.
//!
//! With `keys = ["account:<from>", "account:<to>"]`, the keys are rendered
//! the same way, together, in the order written, and the call runs once
//! every key is held; the label is the templates joined with `", "`:
//!
//! ```text
//! let __keys = ::lock_runtime::__private::keys(&[
//!     ::core::format_args!("account:{}", ::lock_runtime::__private::shown(&from)),
//!     ::core::format_args!("account:{}", ::lock_runtime::__private::shown(&to)),
//! ]);
//! let __options = ::lock_runtime::__private::options(None, None, true)
//!     .label("account:<from>, account:<to>");
//! let __locked = ::lock_runtime::__private::run_locked_all(__keys, __options, async move { .. });
//! ```
//!
//! With `client = expr` the calls are `key_on` and `run_locked_on` (or
//! `keys_on` and `run_locked_all_on`), each taking `&__client` first.
//!
//! `let __ret: ReturnType = { body }` gives `?` and `return` in the body the
//! type to convert into, as in async-trait.
//!
//! `lease` and `wait` expressions are evaluated in the `__options`
//! statement, once per call, also before the body takes the arguments.
//! The kind options follow them in that statement, in a fixed order:
//! `mode = "read"` is `.mode(::lock_runtime::LockMode::Read)`, `permits = 8`
//! is `.permits(8u32)`, `fair = true` is `.fair(true)`, and
//! `waiter_lease = "2s"` is
//! `.waiter_lease(::core::time::Duration::from_millis(2000u64))`, and
//! `hold_at_least = "1s"` is
//! `.hold_at_least(::core::time::Duration::from_millis(1000u64))`; a
//! `permits`, `waiter_lease` or `hold_at_least` expression is evaluated
//! there too, once.
//!
//! `run_locked` gives a lock failure back apart from the body's result, and
//! `finish` converts it with `E::from`: only `finish` has the bound
//! `E: From<LockError>` (as `__private::FromLockError`, whose message says
//! what to implement), so an error type without it is one error. A bound on
//! `run_locked` itself would hold for its future's type too, and fail again
//! at the `.await`, with the compiler's generic message (in an incremental
//! build).
//!
//! `__key` (or `__keys`), `__options` and `__ret` are `Span::mixed_site()`,
//! so the body can neither see nor shadow them. `__locked` is the exception:
//! it comes into scope after the body, so no user code can see it, and it
//! carries the return type's span like the call and `finish`, so that a
//! missing `E: From<LockError>` is reported on the return type, where `E` is
//! written, rather than at the attribute.

use proc_macro2::{Literal, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{ItemFn, ReturnType, Signature, Type};

use crate::args::{Args, DurationArg, Errors, ModeArg, PermitsArg};
use crate::async_trait::{self, AsyncTraitFn};
use crate::key::{Key, KeyArg};

/// The attribute's entry point. On error, the compile errors are emitted next
/// to the unchanged function, so the rest of the crate still sees it.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let result = syn::parse2::<ItemFn>(item.clone())
        .map_err(|error| not_a_function(&item).unwrap_or(error))
        .and_then(|function| expand(args, function));
    match result {
        Ok(tokens) => tokens,
        Err(error) => {
            let error = error.into_compile_error();
            quote!(#error #item)
        }
    }
}

/// The error for the attribute on an `impl` or a trait (perhaps above
/// `#[async_trait]`): it goes on each method.
fn not_a_function(item: &TokenStream) -> Option<syn::Error> {
    let (token, what) = match syn::parse2::<syn::Item>(item.clone()).ok()? {
        syn::Item::Impl(item) => (item.impl_token.span, "an `impl` block"),
        syn::Item::Trait(item) => (item.trait_token.span, "a trait"),
        _ => return None,
    };
    Some(syn::Error::new(
        token,
        format!(
            "`#[distributed_lock]` goes on an `async fn`, not on {what}: put it on each \
             method to lock, inside the block (below `#[async_trait]`, if the block has it)"
        ),
    ))
}

/// What `validate` found: the options, async-trait's form if the function
/// is in it, the return type, the resolved key (or keys, with `keys`).
struct Checked {
    args: Args,
    rewritten: Option<AsyncTraitFn>,
    /// The body's type: the declared return type, or `Result<T, E>` for a
    /// declared `Outcome<T, E>`.
    return_type: Type,
    /// Whether the function returns `Outcome<T, E>` (see [`outcome_result`]).
    told: bool,
    keys: Vec<Key>,
}

/// Parses the options and checks the function and the key, gathering every
/// error.
fn validate(args: TokenStream, function: &ItemFn) -> syn::Result<Checked> {
    let mut errors = Errors::default();
    let args = Args::parse(args, &mut errors);
    // A boxed future that is not async-trait's is one error, not three.
    let rewritten = match async_trait::detect(function) {
        Ok(rewritten) => rewritten,
        Err(error) => {
            errors.push(error);
            return Err(errors.finish().expect_err("an error was gathered"));
        }
    };
    let return_type = errors.keep(check_signature(&function.sig, rewritten.as_ref()));
    // Under async-trait, names bound by patterns are bound in its prologue.
    let mut prologue_names = Vec::new();
    for stmt in rewritten.iter().flat_map(|f| &f.prologue) {
        if let syn::Stmt::Local(local) = stmt {
            crate::key::bound_names(&local.pat, &mut prologue_names);
        }
    }
    // `key` or `keys`: the other one, or neither, left an error.
    let mut keys = Vec::new();
    for lit in args.key.iter().chain(args.keys.iter().flatten()) {
        let key = Key::resolve(lit, &function.sig, prologue_names.clone());
        keys.extend(errors.keep(key));
    }
    errors.finish()?;
    let Some((return_type, told)) = return_type else {
        unreachable!("a missing part always leaves an error");
    };
    if let Some(renamed) = rewritten.as_ref().and_then(|f| f.renamed_self.as_ref()) {
        for arg in keys.iter_mut().flat_map(|key| &mut key.args) {
            arg.expr = async_trait::rename_self(std::mem::take(&mut arg.expr), renamed);
        }
    }
    Ok(Checked {
        args,
        rewritten,
        return_type,
        told,
        keys,
    })
}

/// Validates the options and the signature, then generates the function.
fn expand(args: TokenStream, function: ItemFn) -> syn::Result<TokenStream> {
    let Checked {
        args,
        rewritten,
        return_type,
        told,
        keys,
    } = validate(args, &function)?;
    let renamed_self = rewritten.as_ref().and_then(|f| f.renamed_self.as_ref());

    // An `E` without `From<LockError>` fails `finish`'s bound
    // (`__private::FromLockError`, whose message says what to implement);
    // spanning the call, the `let` and `finish` on the return type, where
    // `E` is written, gives that one error there.
    let call_span = return_type.span();
    let krate = krate_at(&args, call_span);
    let mixed = Span::mixed_site();
    let ret = syn::Ident::new("__ret", mixed);
    let several = args.keys.is_some();
    let rendered = syn::Ident::new(if several { "__keys" } else { "__key" }, mixed);
    let options = syn::Ident::new("__options", mixed);
    // Not mixed-site: see the module docs.
    let locked = syn::Ident::new("__locked", call_span);

    // The key's own calls are spanned on the (first) key, where its errors
    // belong.
    let key_krate = krate_at(&args, keys[0].format.span());
    let Calls {
        pick_client,
        client_arg,
        key_fn,
        run_fn,
    } = calls(&args, &key_krate, &krate, (call_span, told), renamed_self);
    let render = render_keys(key_fn, client_arg.clone(), &args, keys, &rendered);
    let label = label(&args);
    let set_options = options_statement(&krate, &args, &label, &options, renamed_self);

    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = function;
    let body = match &rewritten {
        Some(rewritten) => {
            let stmts = &rewritten.body;
            quote!(async move { #(#stmts)* })
        }
        None => quote! {
            async move {
                let #ret: #return_type = #block;
                #[allow(unreachable_code)]
                #ret
            }
        },
    };
    // An `Outcome<T, E>` is the call's own answer: no conversion, no bound.
    let run = if told {
        quote_spanned! {call_span=>
            let #locked = #run_fn(#client_arg #rendered, #options, #body);
            #locked.await
        }
    } else {
        quote_spanned! {call_span=>
            let #locked = #run_fn(#client_arg #rendered, #options, #body);
            #krate::__private::finish(#locked.await)
        }
    };
    let locked_body = quote! {
        #pick_client
        #render
        #set_options
        #run
    };

    let block = match rewritten {
        Some(AsyncTraitFn {
            box_pin, prologue, ..
        }) => quote! {
            #box_pin(async move {
                #(#prologue)*
                #locked_body
            })
        },
        None => locked_body,
    };
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            #block
        }
    })
}

/// Checks that the function is an `async fn` (or one that `#[async_trait]`
/// rewrote), not `const`, returning a `Result` (or, not under async-trait,
/// an `Outcome<T, E>`); gives the body's type, and whether it is told.
fn check_signature(sig: &Signature, rewritten: Option<&AsyncTraitFn>) -> syn::Result<(Type, bool)> {
    let mut errors = Errors::default();
    if let Some(constness) = &sig.constness {
        errors.push(syn::Error::new_spanned(
            constness,
            "`#[distributed_lock]` cannot be used on a `const fn`: remove `const`",
        ));
    }
    if let Some(rewritten) = rewritten {
        if named_outcome(&rewritten.output) {
            errors.push(syn::Error::new_spanned(
                &rewritten.output,
                "`#[distributed_lock]` gives an `Outcome` only to a plain `async fn`, not to an \
                 `#[async_trait]` method: return `Result<T, E>` here, or call \
                 `run_locked_outcome` in the method's body",
            ));
        } else if !returns_result(&rewritten.output) {
            errors.push(syn::Error::new_spanned(
                &rewritten.output,
                "`#[distributed_lock]` needs a function that returns `Result<T, E>` with \
                 `E: From<lock_runtime::LockError>`, so that a lock failure can be returned: \
                 change the return type to a `Result`",
            ));
        }
        errors.finish()?;
        return Ok((rewritten.output.clone(), false));
    }
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new_spanned(
            sig.fn_token,
            "`#[distributed_lock]` needs an `async fn`, since taking the lock waits: \
             write `async fn`",
        ));
    }
    let return_type = match &sig.output {
        ReturnType::Type(_, ty) if returns_result(ty) => Some(((**ty).clone(), false)),
        ReturnType::Type(_, ty) if outcome_result(ty).is_some() => {
            outcome_result(ty).map(|result| (result, true))
        }
        ReturnType::Type(_, ty) if named_outcome(ty) => {
            errors.push(syn::Error::new_spanned(
                ty,
                "`Outcome` takes two type arguments, as the body's `Result<T, E>` does: \
                 write `lock_runtime::Outcome<T, E>`",
            ));
            None
        }
        ReturnType::Type(_, ty) => {
            errors.push(syn::Error::new_spanned(
                ty,
                "`#[distributed_lock]` needs a function that returns `Result<T, E>` with \
                 `E: From<lock_runtime::LockError>`, so that a lock failure can be returned: \
                 change the return type to a `Result`",
            ));
            None
        }
        ReturnType::Default => {
            errors.push(syn::Error::new(
                sig.paren_token.span.close(),
                "`#[distributed_lock]` needs a function that returns `Result<T, E>` with \
                 `E: From<lock_runtime::LockError>`, so that a lock failure can be returned: \
                 add a return type such as `-> Result<(), MyError>`",
            ));
            None
        }
    };
    errors.finish()?;
    Ok(return_type.expect("no error means a return type"))
}

/// For a return type `Outcome<T, E>` (a path whose last segment is
/// `Outcome` with two type arguments, such as `lock_runtime::Outcome<T,
/// E>`), the body's type `Result<T, E>`: the body returns what it always
/// does, and the call tells how it ended (`run_locked_outcome`'s answer).
fn outcome_result(ty: &Type) -> Option<Type> {
    let Type::Path(path) = ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    if path.qself.is_some() || last.ident != "Outcome" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(generics) = &last.arguments else {
        return None;
    };
    let types: Vec<&Type> = generics
        .args
        .iter()
        .filter_map(|arg| match arg {
            syn::GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
        .collect();
    let [ok, err] = types[..] else {
        return None;
    };
    let span = ty.span();
    Some(syn::parse_quote_spanned!(span=> ::core::result::Result<#ok, #err>))
}

/// Whether `ty` is a path whose last segment is `Outcome`, whatever its
/// arguments.
fn named_outcome(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.path.segments.last().is_some_and(|s| s.ident == "Outcome"))
}

/// Whether `ty` looks like a `Result`: a path whose last segment is `Result`
/// or ends in it (`io::Result<T>`, `anyhow::Result<T>`, `AppResult<T>`). The
/// compiler checks the real type; this only catches `-> u32` and the like
/// early, with a clear message.
fn returns_result(ty: &Type) -> bool {
    match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident.to_string().ends_with("Result")),
        Type::Group(group) => returns_result(&group.elem),
        Type::Paren(paren) => returns_result(&paren.elem),
        _ => false,
    }
}

/// The runtime functions a call goes through, with or without `client`,
/// with `key` or `keys`.
struct Calls {
    /// `let __client = __private::client_of(expr);`, or nothing.
    pick_client: TokenStream,
    /// `&__client,`: the first argument of `key_fn` and `run_fn`, if any.
    client_arg: Option<TokenStream>,
    /// `__private::key` or `__private::key_on`; with `keys`,
    /// `__private::keys` or `__private::keys_on`.
    key_fn: TokenStream,
    /// `__private::run_locked` or `__private::run_locked_on`; with `keys`,
    /// `__private::run_locked_all` or `__private::run_locked_all_on`.
    run_fn: TokenStream,
}

/// The calls for the global client, or for `client = expr` (evaluated once,
/// before the key: with it, the key and the call take `&__client` first);
/// `told`: the forms that give an `Outcome`.
fn calls(
    args: &Args,
    key_krate: &TokenStream,
    krate: &TokenStream,
    (call_span, told): (Span, bool),
    renamed_self: Option<&syn::Ident>,
) -> Calls {
    let (key_name, run_name) = match (&args.keys, &args.client) {
        (None, None) => ("key", "run_locked"),
        (None, Some(_)) => ("key_on", "run_locked_on"),
        (Some(_), None) => ("keys", "run_locked_all"),
        (Some(_), Some(_)) => ("keys_on", "run_locked_all_on"),
    };
    let key_name = syn::Ident::new(key_name, Span::call_site());
    // `run_locked_told` and the like give the whole `Outcome`.
    let run_name = if told {
        format!("{run_name}_told")
    } else {
        run_name.to_owned()
    };
    let run_name = syn::Ident::new(&run_name, call_span);
    let key_fn = quote!(#key_krate::__private::#key_name);
    let run_fn = quote_spanned!(call_span=> #krate::__private::#run_name);
    let Some(expr) = &args.client else {
        return Calls {
            pick_client: TokenStream::new(),
            client_arg: None,
            key_fn,
            run_fn,
        };
    };
    let client = syn::Ident::new("__client", Span::mixed_site());
    let expr = renamed(quote!(#expr), renamed_self);
    let client_krate = krate_at(args, expr.span());
    Calls {
        pick_client: quote_spanned! {expr.span()=>
            let #client = #client_krate::__private::client_of(#expr);
        },
        client_arg: Some(quote!(&#client,)),
        key_fn,
        run_fn,
    }
}

/// The path of the runtime crate: the `crate` option, or `::lock_runtime`
/// spanned at `span`, so that an error in a call through it points there.
fn krate_at(args: &Args, span: Span) -> TokenStream {
    match &args.krate {
        Some((path, _)) => quote!(#path),
        None => quote_spanned!(span=> ::lock_runtime),
    }
}

/// `let __key = ...;`: the key rendered with the client's prefix; with
/// `keys`, `let __keys = ...(&[format_args!(..), ..]);`, every key in the
/// order written. `key_fn` is `__private::key` or `__private::keys`, or
/// `key_on` or `keys_on` with `client_arg`.
fn render_keys(
    key_fn: TokenStream,
    client_arg: Option<TokenStream>,
    args: &Args,
    keys: Vec<Key>,
    rendered: &syn::Ident,
) -> TokenStream {
    let formatted = keys.into_iter().map(|key| format_key(args, key));
    if args.keys.is_some() {
        quote! {
            let #rendered = #key_fn(#client_arg &[#(#formatted),*]);
        }
    } else {
        quote! {
            let #rendered = #key_fn(#client_arg #(#formatted)*);
        }
    }
}

/// `::core::format_args!(..)` for one key, its calls spanned on its
/// template. Each `Display` placeholder goes through `__private::shown`,
/// whose bound names the ways out when the value is not `Display`.
fn format_key(args: &Args, key: Key) -> TokenStream {
    let Key {
        format,
        args: values,
    } = key;
    let krate = krate_at(args, format.span());
    let values = values.into_iter().map(|KeyArg { expr, debug }| {
        if debug {
            expr
        } else {
            let span = format.span();
            quote_spanned!(span=> #krate::__private::shown(&#expr))
        }
    });
    quote!(::core::format_args!(#format #(, #values)*))
}

/// The call's label: the key template as written; with `keys`, the
/// templates joined with `", "`, spanned on the first.
fn label(args: &Args) -> syn::LitStr {
    match (&args.key, &args.keys) {
        (Some(template), _) => template.clone(),
        (None, Some(templates)) => {
            let joined: Vec<String> = templates.iter().map(syn::LitStr::value).collect();
            syn::LitStr::new(&joined.join(", "), templates[0].span())
        }
        (None, None) => unreachable!("a call without a key is an error"),
    }
}

/// `let __options = ...;`: the literal options, the key template (or
/// templates) as the label, then `lease` and `wait` expressions, then the kind options, each
/// expression evaluated once, before the body takes the arguments.
fn options_statement(
    krate: &TokenStream,
    args: &Args,
    label: &syn::LitStr,
    options: &syn::Ident,
    renamed_self: Option<&syn::Ident>,
) -> TokenStream {
    let renew = match args.renew {
        Some((renew, _)) => renew,
        None => true,
    };
    let lease = millis_option(args.lease.as_ref());
    let wait = millis_option(args.wait.as_ref());
    let mut value = quote! {
        #krate::__private::options(#lease, #wait, #renew).label(#label)
    };
    for (name, arg) in [("lease", &args.lease), ("wait", &args.wait)] {
        if let Some(DurationArg::Expr(expr)) = arg {
            let method = syn::Ident::new(name, Span::call_site());
            let duration = duration_expr(args, expr, renamed_self);
            value = quote!(#value.#method(#duration));
        }
    }
    let kinds = kind_calls(args, renamed_self);
    quote!(let #options = #value #kinds;)
}

/// `.mode(..)`, `.permits(..)`, `.fair(..)`, `.waiter_lease(..)` and
/// `.hold_at_least(..)`, for the options that are set, in that order.
fn kind_calls(args: &Args, renamed_self: Option<&syn::Ident>) -> TokenStream {
    let mut calls = TokenStream::new();
    if let Some((mode, span)) = args.mode {
        let krate = krate_at(args, span);
        let variant = match mode {
            ModeArg::Read => quote_spanned!(span=> Read),
            ModeArg::Write => quote_spanned!(span=> Write),
        };
        calls.extend(quote!(.mode(#krate::LockMode::#variant)));
    }
    match &args.permits {
        Some(PermitsArg::Count(count, span)) => {
            let mut literal = Literal::u32_suffixed(*count);
            literal.set_span(*span);
            calls.extend(quote!(.permits(#literal)));
        }
        Some(PermitsArg::Expr(expr)) => {
            let span = expr.span();
            let expr = renamed(quote!(#expr), renamed_self);
            calls.extend(quote_spanned!(span=> .permits(#expr)));
        }
        None => {}
    }
    if let Some((fair, span)) = args.fair {
        let fair = syn::LitBool::new(fair, span);
        calls.extend(quote!(.fair(#fair)));
    }
    for (name, arg) in [
        ("waiter_lease", &args.waiter_lease),
        ("hold_at_least", &args.hold_at_least),
    ] {
        calls.extend(duration_call(args, name, arg.as_ref(), renamed_self));
    }
    calls
}

/// `.name(Duration::from_millis(ms))` for a duration string, or
/// `.name(__private::duration(expr))`; nothing for an option not set.
fn duration_call(
    args: &Args,
    name: &str,
    arg: Option<&DurationArg>,
    renamed_self: Option<&syn::Ident>,
) -> TokenStream {
    let method = syn::Ident::new(name, Span::call_site());
    match arg {
        Some(DurationArg::Millis(millis, span)) => {
            let mut literal = Literal::u64_suffixed(*millis);
            literal.set_span(*span);
            quote!(.#method(::core::time::Duration::from_millis(#literal)))
        }
        Some(DurationArg::Expr(expr)) => {
            let duration = duration_expr(args, expr, renamed_self);
            quote!(.#method(#duration))
        }
        None => TokenStream::new(),
    }
}

/// `__private::duration(expr)`, spanned on `expr`: a `Duration` or
/// `&Duration` from a `lease`, `wait`, `waiter_lease` or `hold_at_least`
/// expression.
fn duration_expr(args: &Args, expr: &syn::Expr, renamed_self: Option<&syn::Ident>) -> TokenStream {
    let span = expr.span();
    let krate = krate_at(args, span);
    let expr = renamed(quote!(#expr), renamed_self);
    quote_spanned!(span=> #krate::__private::duration(#expr))
}

/// `expr` with `self` renamed to async-trait's name for it, if it has one.
fn renamed(expr: TokenStream, renamed_self: Option<&syn::Ident>) -> TokenStream {
    match renamed_self {
        Some(renamed) => async_trait::rename_self(expr, renamed),
        None => expr,
    }
}

/// `Some(ms)` for a duration string, `None` otherwise (no option, or an
/// expression set after), as the runtime's `options` takes them.
fn millis_option(value: Option<&DurationArg>) -> TokenStream {
    match value {
        Some(DurationArg::Millis(millis, span)) => {
            let mut literal = Literal::u64_suffixed(*millis);
            literal.set_span(*span);
            quote!(::core::option::Option::Some(#literal))
        }
        _ => quote!(::core::option::Option::None),
    }
}

#[cfg(test)]
mod tests;
