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
//! `let __ret: ReturnType = { body }` gives `?` and `return` in the body the
//! type to convert into, as in async-trait.
//!
//! `lease` and `wait` expressions are evaluated in the `__options`
//! statement, once per call, also before the body takes the arguments.
//! The kind options follow them in that statement, in a fixed order:
//! `mode = "read"` is `.mode(::lock_runtime::LockMode::Read)`, `permits = 8`
//! is `.permits(8u32)`, `fair = true` is `.fair(true)`, and
//! `waiter_lease = "2s"` is
//! `.waiter_lease(::core::time::Duration::from_millis(2000u64))`; a
//! `permits` or `waiter_lease` expression is evaluated there too, once.
//!
//! `run_locked` gives a lock failure back apart from the body's result, and
//! `finish` converts it with `E::from`: only `finish` has the bound
//! `E: From<LockError>` (as `__private::FromLockError`, whose message says
//! what to implement), so an error type without it is one error. A bound on
//! `run_locked` itself would hold for its future's type too, and fail again
//! at the `.await`, with the compiler's generic message (in an incremental
//! build).
//!
//! `__key`, `__options` and `__ret` are `Span::mixed_site()`, so the body can neither see
//! nor shadow them. `__locked` is the exception: it comes into scope after the
//! body, so no user code can see it, and it carries the return type's span
//! like the call and `finish`, so that a missing `E: From<LockError>` is
//! reported on the return type, where `E` is written, rather than at the
//! attribute.

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
/// is in it, the return type, the resolved key.
struct Checked {
    args: Args,
    rewritten: Option<AsyncTraitFn>,
    return_type: Type,
    key: Key,
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
    let key = args
        .key
        .as_ref()
        .and_then(|lit| errors.keep(Key::resolve(lit, &function.sig, prologue_names)));
    errors.finish()?;
    let (Some(return_type), Some(mut key)) = (return_type, key) else {
        unreachable!("a missing part always leaves an error");
    };
    if let Some(renamed) = rewritten.as_ref().and_then(|f| f.renamed_self.as_ref()) {
        for arg in &mut key.args {
            arg.expr = async_trait::rename_self(std::mem::take(&mut arg.expr), renamed);
        }
    }
    Ok(Checked {
        args,
        rewritten,
        return_type,
        key,
    })
}

/// Validates the options and the signature, then generates the function.
fn expand(args: TokenStream, function: ItemFn) -> syn::Result<TokenStream> {
    let Checked {
        args,
        rewritten,
        return_type,
        key,
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
    let rendered = syn::Ident::new("__key", mixed);
    let options = syn::Ident::new("__options", mixed);
    // Not mixed-site: see the module docs.
    let locked = syn::Ident::new("__locked", call_span);

    // The key's own calls are spanned on the key, where its errors belong.
    let key_krate = krate_at(&args, key.format.span());
    let Calls {
        pick_client,
        client_arg,
        key_fn,
        run_fn,
    } = calls(&args, &key_krate, &krate, call_span, renamed_self);
    let render = render_key(key_fn, client_arg.clone(), &key_krate, key, &rendered);
    let template = args.key.as_ref().expect("a key was resolved");
    let set_options = options_statement(&krate, &args, template, &options, renamed_self);

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
    let run = quote_spanned! {call_span=>
        let #locked = #run_fn(#client_arg #rendered, #options, #body);
        #krate::__private::finish(#locked.await)
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
/// rewrote), not `const`, returning a `Result`; gives the return type.
fn check_signature(sig: &Signature, rewritten: Option<&AsyncTraitFn>) -> syn::Result<Type> {
    let mut errors = Errors::default();
    if let Some(constness) = &sig.constness {
        errors.push(syn::Error::new_spanned(
            constness,
            "`#[distributed_lock]` cannot be used on a `const fn`: remove `const`",
        ));
    }
    if let Some(rewritten) = rewritten {
        if !returns_result(&rewritten.output) {
            errors.push(syn::Error::new_spanned(
                &rewritten.output,
                "`#[distributed_lock]` needs a function that returns `Result<T, E>` with \
                 `E: From<lock_runtime::LockError>`, so that a lock failure can be returned: \
                 change the return type to a `Result`",
            ));
        }
        errors.finish()?;
        return Ok(rewritten.output.clone());
    }
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new_spanned(
            sig.fn_token,
            "`#[distributed_lock]` needs an `async fn`, since taking the lock waits: \
             write `async fn`",
        ));
    }
    let return_type = match &sig.output {
        ReturnType::Type(_, ty) if returns_result(ty) => Some((**ty).clone()),
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

/// The runtime functions a call goes through, with or without `client`.
struct Calls {
    /// `let __client = __private::client_of(expr);`, or nothing.
    pick_client: TokenStream,
    /// `&__client,`: the first argument of `key_fn` and `run_fn`, if any.
    client_arg: Option<TokenStream>,
    /// `__private::key` or `__private::key_on`.
    key_fn: TokenStream,
    /// `__private::run_locked` or `__private::run_locked_on`.
    run_fn: TokenStream,
}

/// The calls for the global client, or for `client = expr` (evaluated once,
/// before the key: with it, the key and the call take `&__client` first).
fn calls(
    args: &Args,
    key_krate: &TokenStream,
    krate: &TokenStream,
    call_span: Span,
    renamed_self: Option<&syn::Ident>,
) -> Calls {
    let Some(expr) = &args.client else {
        return Calls {
            pick_client: TokenStream::new(),
            client_arg: None,
            key_fn: quote!(#key_krate::__private::key),
            run_fn: quote_spanned!(call_span=> #krate::__private::run_locked),
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
        key_fn: quote!(#key_krate::__private::key_on),
        run_fn: quote_spanned!(call_span=> #krate::__private::run_locked_on),
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

/// `let __key = ...;`: the key rendered with the client's prefix. Each
/// `Display` placeholder goes through `__private::shown`, whose bound names
/// the ways out when the value is not `Display`.
/// `key_fn` is `__private::key`, or `__private::key_on` with `client_arg`.
fn render_key(
    key_fn: TokenStream,
    client_arg: Option<TokenStream>,
    krate: &TokenStream,
    key: Key,
    rendered: &syn::Ident,
) -> TokenStream {
    let Key { format, args } = key;
    let args = args.into_iter().map(|KeyArg { expr, debug }| {
        if debug {
            expr
        } else {
            let span = format.span();
            quote_spanned!(span=> #krate::__private::shown(&#expr))
        }
    });
    quote! {
        let #rendered = #key_fn(#client_arg ::core::format_args!(#format #(, #args)*));
    }
}

/// `let __options = ...;`: the literal options, the key template as the
/// label, then `lease` and `wait` expressions, then the kind options, each
/// expression evaluated once, before the body takes the arguments.
fn options_statement(
    krate: &TokenStream,
    args: &Args,
    template: &syn::LitStr,
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
        #krate::__private::options(#lease, #wait, #renew).label(#template)
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

/// `.mode(..)`, `.permits(..)`, `.fair(..)` and `.waiter_lease(..)`, for
/// the options that are set, in that order.
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
    match &args.waiter_lease {
        Some(DurationArg::Millis(millis, span)) => {
            let mut literal = Literal::u64_suffixed(*millis);
            literal.set_span(*span);
            calls.extend(quote!(.waiter_lease(::core::time::Duration::from_millis(#literal))));
        }
        Some(DurationArg::Expr(expr)) => {
            let duration = duration_expr(args, expr, renamed_self);
            calls.extend(quote!(.waiter_lease(#duration)));
        }
        None => {}
    }
    calls
}

/// `__private::duration(expr)`, spanned on `expr`: a `Duration` or
/// `&Duration` from a `lease`, `wait` or `waiter_lease` expression.
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
mod tests {
    use proc_macro2::TokenStream;
    use quote::quote;

    fn assert_expands(args: TokenStream, item: TokenStream, expected: TokenStream) {
        let actual = super::distributed_lock(args, item);
        assert_eq!(actual.to_string(), expected.to_string());
    }

    #[test]
    fn method_with_placeholder() {
        assert_expands(
            quote!(key = "order:<id>", lease = "30s"),
            quote! {
                /// Pays.
                #[inline]
                pub async fn pay(&self, id: u64) -> Result<(), E> { body() }
            },
            quote! {
                /// Pays.
                #[inline]
                pub async fn pay(&self, id: u64) -> Result<(), E> {
                    let __key = ::lock_runtime::__private::key(
                        ::core::format_args!("order:{}", ::lock_runtime::__private::shown(&id))
                    );
                    let __options = ::lock_runtime::__private::options(
                        ::core::option::Option::Some(30000u64),
                        ::core::option::Option::None,
                        true
                    ).label("order:<id>");
                    let __locked = ::lock_runtime::__private::run_locked(
                        __key,
                        __options,
                        async move {
                            let __ret: Result<(), E> = { body() };
                            #[allow(unreachable_code)]
                            __ret
                        }
                    );
                    ::lock_runtime::__private::finish(__locked.await)
                }
            },
        );
    }

    #[test]
    fn constant_key_and_every_option() {
        assert_expands(
            quote!(
                key = "{jobs}",
                wait = "0s",
                renew = false,
                lease = "1m30s",
                crate = "locks"
            ),
            quote! {
                async fn nightly<T: Clone>(t: T) -> io::Result<T> where T: Send { Ok(t) }
            },
            quote! {
                async fn nightly<T: Clone>(t: T) -> io::Result<T> where T: Send {
                    let __key = locks::__private::key(::core::format_args!("{{jobs}}"));
                    let __options = locks::__private::options(
                        ::core::option::Option::Some(90000u64),
                        ::core::option::Option::Some(0u64),
                        false
                    ).label("{jobs}");
                    let __locked = locks::__private::run_locked(
                        __key,
                        __options,
                        async move {
                            let __ret: io::Result<T> = { Ok(t) };
                            #[allow(unreachable_code)]
                            __ret
                        }
                    );
                    locks::__private::finish(__locked.await)
                }
            },
        );
    }

    #[test]
    fn expressions_and_debug_placeholders() {
        assert_expands(
            quote!(
                key = "job:<job:?>",
                lease = self.lease,
                wait = wait_for(&job)
            ),
            quote! {
                async fn run(&self, job: Job) -> Result<(), E> { Ok(()) }
            },
            quote! {
                async fn run(&self, job: Job) -> Result<(), E> {
                    let __key = ::lock_runtime::__private::key(
                        ::core::format_args!("job:{:?}", job)
                    );
                    let __options = ::lock_runtime::__private::options(
                        ::core::option::Option::None,
                        ::core::option::Option::None,
                        true
                    )
                    .label("job:<job:?>")
                    .lease(::lock_runtime::__private::duration(self.lease))
                    .wait(::lock_runtime::__private::duration(wait_for(&job)));
                    let __locked = ::lock_runtime::__private::run_locked(
                        __key,
                        __options,
                        async move {
                            let __ret: Result<(), E> = { Ok(()) };
                            #[allow(unreachable_code)]
                            __ret
                        }
                    );
                    ::lock_runtime::__private::finish(__locked.await)
                }
            },
        );
    }

    /// For the tests of the kind options: the expansion of
    /// `async fn f(&self, id: u64) -> Result<(), E>` with `args`, and the
    /// expected one, whose `__options` value is `options`.
    fn expand_kinds(args: TokenStream, options: TokenStream) -> (TokenStream, TokenStream) {
        let item = quote!(
            async fn f(&self, id: u64) -> Result<(), E> {
                Ok(())
            }
        );
        let expected = quote! {
            async fn f(&self, id: u64) -> Result<(), E> {
                let __key = ::lock_runtime::__private::key(
                    ::core::format_args!("doc:{}", ::lock_runtime::__private::shown(&id))
                );
                let __options = #options;
                let __locked = ::lock_runtime::__private::run_locked(
                    __key,
                    __options,
                    async move {
                        let __ret: Result<(), E> = { Ok(()) };
                        #[allow(unreachable_code)]
                        __ret
                    }
                );
                ::lock_runtime::__private::finish(__locked.await)
            }
        };
        (super::distributed_lock(args, item), expected)
    }

    /// `__private::options` with no lease, no wait, renewal on, labelled
    /// `doc:<id>`.
    fn plain_options() -> TokenStream {
        quote! {
            ::lock_runtime::__private::options(
                ::core::option::Option::None,
                ::core::option::Option::None,
                true
            ).label("doc:<id>")
        }
    }

    #[test]
    fn mode_read_and_write() {
        let plain = plain_options();
        let (actual, expected) = expand_kinds(
            quote!(key = "doc:<id>", mode = "read"),
            quote!(#plain.mode(::lock_runtime::LockMode::Read)),
        );
        assert_eq!(actual.to_string(), expected.to_string());
        let (actual, expected) = expand_kinds(
            quote!(key = "doc:<id>", mode = "write"),
            quote!(#plain.mode(::lock_runtime::LockMode::Write)),
        );
        assert_eq!(actual.to_string(), expected.to_string());
    }

    #[test]
    fn permits_literal_and_expressions() {
        let plain = plain_options();
        let (actual, expected) = expand_kinds(
            quote!(key = "doc:<id>", permits = 8),
            quote!(#plain.permits(8u32)),
        );
        assert_eq!(actual.to_string(), expected.to_string());
        let (actual, expected) = expand_kinds(
            quote!(key = "doc:<id>", permits = self.limits.permits(id)),
            quote!(#plain.permits(self.limits.permits(id))),
        );
        assert_eq!(actual.to_string(), expected.to_string());
        let (actual, expected) = expand_kinds(
            quote!(key = "doc:<id>", permits = PERMITS),
            quote!(#plain.permits(PERMITS)),
        );
        assert_eq!(actual.to_string(), expected.to_string());
    }

    #[test]
    fn fair_with_waiter_lease() {
        let plain = plain_options();
        let (actual, expected) = expand_kinds(
            quote!(key = "doc:<id>", fair = true, waiter_lease = "2s"),
            quote! {
                #plain
                    .fair(true)
                    .waiter_lease(::core::time::Duration::from_millis(2000u64))
            },
        );
        assert_eq!(actual.to_string(), expected.to_string());
        // An expression goes through `duration`, as `lease` and `wait` do,
        // after them; `fair = false` is kept as written.
        let (actual, expected) = expand_kinds(
            quote!(
                key = "doc:<id>",
                waiter_lease = self.waiter_lease,
                fair = false,
                wait = self.wait
            ),
            quote! {
                #plain
                    .wait(::lock_runtime::__private::duration(self.wait))
                    .fair(false)
                    .waiter_lease(::lock_runtime::__private::duration(self.waiter_lease))
            },
        );
        assert_eq!(actual.to_string(), expected.to_string());
    }

    /// Each error of the kind options, as `Args::parse` gathers them.
    #[test]
    fn kind_option_errors() {
        let item = quote!(
            async fn f(id: u64) -> Result<(), E> {
                Ok(())
            }
        );
        let cases = [
            (quote!(mode = "reed"), "unknown mode `reed`"),
            (
                quote!(mode = Read),
                r#"`mode` takes the string \"read\" or"#,
            ),
            (quote!(permits = 0), "`permits` must be at least 1"),
            (quote!(permits = -2), "`permits` cannot be negative"),
            (quote!(permits = "8"), "as a whole number without quotes"),
            (quote!(permits = 1.5), "as a whole number without quotes"),
            (
                quote!(permits = 8u64),
                "`permits` takes a `u32`, not a `u64`",
            ),
            (
                quote!(permits = 4294967296),
                "`permits = 4294967296` is too large",
            ),
            (quote!(permits = 4294967295), ""),
            (
                quote!(mode = "read", permits = 2),
                "`permits` cannot be combined with `mode`",
            ),
            (
                quote!(permits = 2, mode = "write"),
                "`mode` cannot be combined with `permits`",
            ),
            (
                quote!(mode = "read", fair = true),
                "`fair = true` cannot be combined with `mode`",
            ),
            (
                quote!(fair = true, permits = n),
                "`permits` cannot be combined with `fair = true`",
            ),
            (
                quote!(fair = false, permits = 2, mode = "read"),
                "cannot be combined",
            ),
            (quote!(fair = false, mode = "read"), ""),
            (quote!(fair = "yes"), "`fair` takes `true` or `false`"),
            (
                quote!(waiter_lease = "0s"),
                "`waiter_lease` must be greater than zero",
            ),
            (
                quote!(waiter_lease = "9ms"),
                "`waiter_lease` must be at least 10ms",
            ),
            (quote!(waiter_lease = "10ms", mode = "read"), ""),
            (
                quote!(permits = 2, permits = 3),
                "duplicate option `permits`",
            ),
        ];
        for (args, message) in cases {
            let out = super::distributed_lock(quote!(key = "k", #args), item.clone());
            let out = out.to_string();
            if message.is_empty() {
                assert!(!out.contains("compile_error"), "{args}: {out}");
            } else {
                assert!(
                    out.contains(message),
                    "{args}: {message} missing from {out}"
                );
            }
        }
    }

    #[test]
    fn errors_come_with_the_unchanged_function() {
        let item = quote!(
            fn f(id: u64) -> u64 {
                id
            }
        );
        let out = super::distributed_lock(quote!(key = "<x>", lease = "0s", y = 1), item.clone());
        let out = out.to_string();
        assert!(out.ends_with(&item.to_string()), "{out}");
        // The unknown option stops the parse of options; the signature and
        // the key are still checked.
        for message in [
            "unknown option `y`",
            "needs an `async fn`",
            "returns `Result<T, E>`",
            "unknown placeholder `<x>`",
        ] {
            assert!(out.contains(message), "{message} missing from {out}");
        }
    }
}
