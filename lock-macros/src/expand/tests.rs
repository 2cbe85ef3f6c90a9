//! The expansion, token for token, and the errors it gathers.

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

#[test]
fn keys_render_every_template_in_one_statement() {
    assert_expands(
        quote!(
            keys = ["account:<from>", "shop:<self.name>:<to:?>"],
            lease = "30s"
        ),
        quote! {
            pub async fn transfer(&self, from: u64, to: Id) -> Result<(), E> { body() }
        },
        quote! {
            pub async fn transfer(&self, from: u64, to: Id) -> Result<(), E> {
                let __keys = ::lock_runtime::__private::keys(&[
                    ::core::format_args!("account:{}", ::lock_runtime::__private::shown(&from)),
                    ::core::format_args!(
                        "shop:{}:{:?}",
                        ::lock_runtime::__private::shown(&self.name),
                        to
                    )
                ]);
                let __options = ::lock_runtime::__private::options(
                    ::core::option::Option::Some(30000u64),
                    ::core::option::Option::None,
                    true
                ).label("account:<from>, shop:<self.name>:<to:?>");
                let __locked = ::lock_runtime::__private::run_locked_all(
                    __keys,
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

/// With `client`, the keys are rendered with that client's prefix and the
/// call runs on it; `mode` goes with `keys`, as do `crate` and expressions.
#[test]
fn keys_on_a_client_with_mode() {
    assert_expands(
        quote!(
            keys = ["{jobs}:a", "b:<id>"],
            client = &self.locks,
            mode = "read",
            wait = self.wait,
            crate = "locks"
        ),
        quote! {
            async fn read(&self, id: u64) -> Result<(), E> { Ok(()) }
        },
        quote! {
            async fn read(&self, id: u64) -> Result<(), E> {
                let __client = locks::__private::client_of(&self.locks);
                let __keys = locks::__private::keys_on(&__client, &[
                    ::core::format_args!("{{jobs}}:a"),
                    ::core::format_args!("b:{}", locks::__private::shown(&id))
                ]);
                let __options = locks::__private::options(
                    ::core::option::Option::None,
                    ::core::option::Option::None,
                    true
                )
                .label("{jobs}:a, b:<id>")
                .wait(locks::__private::duration(self.wait))
                .mode(locks::LockMode::Read);
                let __locked = locks::__private::run_locked_all_on(
                    &__client,
                    __keys,
                    __options,
                    async move {
                        let __ret: Result<(), E> = { Ok(()) };
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
fn hold_at_least_literal_and_expression() {
    let plain = plain_options();
    let (actual, expected) = expand_kinds(
        quote!(
            key = "doc:<id>",
            hold_at_least = "1m30s",
            waiter_lease = "2s"
        ),
        quote! {
            #plain
                .waiter_lease(::core::time::Duration::from_millis(2000u64))
                .hold_at_least(::core::time::Duration::from_millis(90000u64))
        },
    );
    assert_eq!(actual.to_string(), expected.to_string());
    // An expression goes through `duration`; a writer may hold at least.
    let (actual, expected) = expand_kinds(
        quote!(
            key = "doc:<id>",
            hold_at_least = self.period,
            mode = "write"
        ),
        quote! {
            #plain
                .mode(::lock_runtime::LockMode::Write)
                .hold_at_least(::lock_runtime::__private::duration(self.period))
        },
    );
    assert_eq!(actual.to_string(), expected.to_string());
}

/// Expands `async fn f(from: u64, to: u64)` with each case's options and
/// checks that the output has the case's message; an empty message means
/// the options compile.
fn assert_messages(cases: Vec<(TokenStream, &str)>) {
    let item = quote!(
        async fn f(from: u64, to: u64) -> Result<(), E> {
            Ok(())
        }
    );
    for (args, message) in cases {
        let out = super::distributed_lock(args.clone(), item.clone()).to_string();
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

/// Each error of `keys`, from `Args::parse` and the key checks.
#[test]
fn keys_errors() {
    assert_messages(vec![
        (
            quote!(key = "k", keys = ["a", "b"]),
            "`keys` cannot be combined with `key`: a call takes one key",
        ),
        (
            quote!(keys = ["a", "b"], key = "k"),
            "`key` cannot be combined with `keys`",
        ),
        (quote!(keys = []), "`keys` is empty: list the keys"),
        (
            quote!(keys = ["a:<from>", "b", "a:<from>"]),
            r#"the key template \"a:<from>\" is listed twice in `keys`: remove this one"#,
        ),
        (
            quote!(keys = ["a:<from>", "a:<to>", "a:<nope>"]),
            "unknown placeholder `<nope>`: `f` has no argument `nope`",
        ),
        (
            quote!(keys = ["order:{from}"]),
            "`{from}` in the key is literal text",
        ),
        (quote!(keys = ["a", b]), "`keys` takes string literals"),
        (
            quote!(keys = "a:<from>"),
            r#"write `keys = [\"a:<from>\"]`, or `key = \"a:<from>\"`"#,
        ),
        (
            quote!(keys = KEYS),
            "`keys` takes an array of string literals",
        ),
        (
            quote!(lease = "1s"),
            "missing `key`: name the lock, e.g. `#[distributed_lock(key = \\\"order:<id>\\\")]`, \
             or list the keys to take together",
        ),
        (
            quote!(keys = ["a", "b"], permits = 2),
            "`permits` cannot be combined with `keys`: a count of holders",
        ),
        (
            quote!(fair = true, keys = ["a", "b"]),
            "`keys` cannot be combined with `fair = true`: an arrival order",
        ),
        (quote!(keys = ["a", "b"], fair = false), ""),
        (quote!(keys = ["a", "b"], mode = "read"), ""),
        (quote!(mode = "write", keys = ["a:<from>"]), ""),
        (
            quote!(keys = ["a"], keys = ["b"]),
            "duplicate option `keys`",
        ),
    ]);
}

/// Each error of `hold_at_least`, from `Args::parse`.
#[test]
fn hold_at_least_errors() {
    assert_messages(vec![
        (
            quote!(key = "k", hold_at_least = "0s"),
            "`hold_at_least` must be greater than zero",
        ),
        (
            quote!(key = "k", hold_at_least = "1x"),
            "invalid duration `1x` for `hold_at_least`",
        ),
        (quote!(key = "k", hold_at_least = "1ms"), ""),
        (
            quote!(key = "k", hold_at_least = "1s", permits = 2),
            "`permits` cannot be combined with `hold_at_least`: `hold_at_least` is \
             supported only for a plain or write lock on one key",
        ),
        (
            quote!(key = "k", fair = true, hold_at_least = "1s"),
            "`hold_at_least` cannot be combined with `fair = true`",
        ),
        (
            quote!(key = "k", mode = "read", hold_at_least = "1s"),
            r#"`hold_at_least` cannot be combined with `mode = \"read\"`"#,
        ),
        (
            quote!(keys = ["a", "b"], hold_at_least = "1s"),
            "`hold_at_least` cannot be combined with `keys`",
        ),
        (quote!(key = "k", mode = "write", hold_at_least = "1s"), ""),
        (
            quote!(key = "k", hold_at_least = "1s", hold_at_least = "2s"),
            "duplicate option `hold_at_least`",
        ),
    ]);
}
