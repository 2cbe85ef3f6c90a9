//! The attribute's options: `key`, `lease`, `wait`, `renew`, `crate` and
//! `client`.
//!
//! `lease` and `wait` are a duration string, checked here, or any other
//! expression, evaluated at call time (its type is checked by the compiler).

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::{Expr, ExprLit, Lit, LitStr};

use crate::duration;

/// The names the attribute accepts, in the order error messages list them.
const OPTIONS: &str = "`key`, `lease`, `wait`, `renew`, `crate`, `client`";

/// The options as written; each value is kept with the span of the literal it
/// came from, so later errors can point at it.
#[derive(Default)]
pub(crate) struct Args {
    /// The key template, still unparsed.
    pub key: Option<LitStr>,
    /// The lease; a literal is never under 10 ms.
    pub lease: Option<DurationArg>,
    /// The wait; zero means try once.
    pub wait: Option<DurationArg>,
    /// Whether the watchdog renews the lease.
    pub renew: Option<(bool, Span)>,
    /// The path of the runtime crate, for renamed dependencies.
    pub krate: Option<(syn::Path, Span)>,
    /// The client to lock on instead of the global one: an expression of
    /// type `LockClient` or `&LockClient`.
    pub client: Option<Box<Expr>>,
}

impl Args {
    /// Parses the tokens inside `#[distributed_lock(...)]`, adding what is
    /// wrong to `errors` and leaving the options that are wrong out.
    ///
    /// Value errors (a bad duration, a duplicate option, ...) are gathered so
    /// that several are reported at once; a syntax error or an unknown option
    /// stops the parse.
    pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Args {
        let mut args = Args::default();
        if let Some(error) = positional_key(&tokens) {
            errors.push(error);
            return args;
        }
        // Whether `key` was written at all, even with a bad value.
        let mut key_seen = false;

        let parser = syn::meta::parser(|meta| {
            let Some(name) = meta.path.get_ident().map(ToString::to_string) else {
                return Err(unknown_option(&meta));
            };
            if !["key", "lease", "wait", "renew", "crate", "client"].contains(&name.as_str()) {
                return Err(unknown_option(&meta));
            }
            // Errors in reading the tokens stop here; errors in the value are
            // gathered below and parsing goes on with the next option.
            let value: Expr = meta.value()?.parse()?;
            match name.as_str() {
                "key" => {
                    key_seen = true;
                    let key = string_lit(value, &name, "\"order:<id>\"");
                    set_once(&meta, &mut args.key, key, errors);
                }
                "lease" => {
                    let lease = duration_millis(value, &name);
                    set_once(&meta, &mut args.lease, lease, errors);
                }
                "wait" => {
                    let wait = duration_millis(value, &name);
                    set_once(&meta, &mut args.wait, wait, errors);
                }
                "renew" => {
                    let renew = bool_lit(value, &name);
                    set_once(&meta, &mut args.renew, renew, errors);
                }
                "client" => set_once(&meta, &mut args.client, Ok(Box::new(value)), errors),
                _ => {
                    let krate = crate_path(value, &name);
                    set_once(&meta, &mut args.krate, krate, errors);
                }
            }
            Ok(())
        });
        if let Err(error) = parser.parse2(tokens) {
            // The options after the bad one were not read: `key` may be there.
            errors.push(error);
        } else if !key_seen {
            errors.push(syn::Error::new(
                Span::call_site(),
                "missing `key`: name the lock, e.g. \
                 `#[distributed_lock(key = \"order:<id>\")]`",
            ));
        }
        args
    }
}

/// The error for a key written without `key =`, as in
/// `#[distributed_lock("order:<id>")]`: it shows the named form.
fn positional_key(tokens: &TokenStream) -> Option<syn::Error> {
    let first = tokens.clone().into_iter().next()?;
    let lit = syn::parse2::<LitStr>(first.into()).ok()?;
    Some(syn::Error::new(
        lit.span(),
        format!(
            "the key is a named option: write `#[distributed_lock(key = {})]`",
            lit.token()
        ),
    ))
}

/// The error for an option name that is not one of [`OPTIONS`].
fn unknown_option(meta: &ParseNestedMeta<'_>) -> syn::Error {
    let name = meta
        .path
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect::<Vec<_>>()
        .join("::");
    syn::Error::new_spanned(
        &meta.path,
        format!("unknown option `{name}`; expected {OPTIONS}"),
    )
}

/// The string literal `value`. Anything else is an error spanned on it, with
/// `example` showing the expected form.
fn string_lit(value: Expr, name: &str, example: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit),
            attrs,
        }) if attrs.is_empty() => Ok(lit),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{name}` takes a string literal: `{name} = {example}`"),
        )),
    }
}

/// The shortest lease, in milliseconds: the runtime's
/// `LockOptions::SHORTEST_LEASE`.
const SHORTEST_LEASE_MS: u64 = 10;

/// A duration string in milliseconds, for `lease` (at least 10 ms) or
/// `wait`; any other expression is kept for the call.
fn duration_millis(value: Expr, name: &str) -> syn::Result<DurationArg> {
    let lit = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit),
            attrs,
        }) if attrs.is_empty() => lit,
        other => return Ok(DurationArg::Expr(Box::new(other))),
    };
    let text = lit.value();
    let millis = duration::parse_millis(&text)
        .map_err(|error| syn::Error::new(lit.span(), error.message(name, &text)))?;
    if name == "lease" && millis == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "`lease` must be greater than zero: give a duration such as \"30s\", \
             or leave `lease` out to use the client's default",
        ));
    }
    if name == "lease" && millis < SHORTEST_LEASE_MS {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`lease` must be at least 10ms: a lock is trusted for its lease less a \
                 clock-drift margin (2 ms and a share of the lease), so a {millis} ms lease \
                 would be lost as soon as it is taken; give a duration such as \"30s\""
            ),
        ));
    }
    Ok(DurationArg::Millis(millis, lit.span()))
}

/// The bool literal `value`.
fn bool_lit(value: Expr, name: &str) -> syn::Result<(bool, Span)> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(lit),
            attrs,
        }) if attrs.is_empty() => Ok((lit.value, lit.span)),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{name}` takes `true` or `false`, without quotes: `{name} = false`"),
        )),
    }
}

/// The path in the string literal `value`, such as `"::lock_runtime"`.
fn crate_path(value: Expr, name: &str) -> syn::Result<(syn::Path, Span)> {
    let lit = string_lit(value, name, "\"::lock_runtime\"")?;
    let path = lit.parse::<syn::Path>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`{}` is not a path: `{name}` names the runtime crate, as in \
                 `{name} = \"::lock_runtime\"`",
                lit.value()
            ),
        )
    })?;
    Ok((path, lit.span()))
}

/// Stores the first value of an option. A second occurrence and a bad value
/// are recorded in `errors`.
fn set_once<T>(
    meta: &ParseNestedMeta<'_>,
    slot: &mut Option<T>,
    value: syn::Result<T>,
    errors: &mut Errors,
) {
    if slot.is_some() {
        let name = meta
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        errors.push(syn::Error::new_spanned(
            &meta.path,
            format!("duplicate option `{name}`: give it once"),
        ));
    }
    match value {
        Ok(value) => {
            slot.get_or_insert(value);
        }
        Err(error) => errors.push(error),
    }
}

/// A `lease` or `wait` as written.
pub(crate) enum DurationArg {
    /// A duration string, in milliseconds, with the literal's span.
    Millis(u64, Span),
    /// An expression of type `Duration`, evaluated at call time.
    Expr(Box<Expr>),
}

/// Several errors gathered into one, reported together.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Adds `error` after the ones already gathered.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(first) => first.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Keeps the value of `result`, or gathers its error.
    pub(crate) fn keep<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    /// `Err` with every gathered error, or `Ok` if there were none.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}
