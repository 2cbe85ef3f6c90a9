//! The attribute's options: `key`, `keys`, `lease`, `wait`, `renew`, `mode`,
//! `permits`, `fair`, `waiter_lease`, `hold_at_least`, `crate` and `client`.
//!
//! `key` is a string literal and `keys` an array of them, neither empty nor
//! with a template twice; a call has one of the two. `lease`, `wait`,
//! `waiter_lease` and `hold_at_least` are a duration string, checked here,
//! or any other expression, evaluated at call time (its type is checked by
//! the compiler). `permits` is a count, checked here, or any other
//! expression of type `u32`. `mode` (`"read"` or `"write"`) and `fair` are
//! literals. The options that do not exist together (see [`Kind`]) are
//! refused here.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::{Expr, ExprLit, ExprUnary, Lit, LitInt, LitStr, UnOp};

use crate::duration;
use crate::kind::Kind;

/// The names the attribute accepts, in the order error messages list them.
const OPTIONS: [&str; 12] = [
    "key",
    "keys",
    "lease",
    "wait",
    "renew",
    "mode",
    "permits",
    "fair",
    "waiter_lease",
    "hold_at_least",
    "crate",
    "client",
];

/// The options as written; each value is kept with the span of the literal it
/// came from, so later errors can point at it.
#[derive(Default)]
pub(crate) struct Args {
    /// The key template, still unparsed.
    pub key: Option<LitStr>,
    /// The key templates of `keys = [...]`, still unparsed: at least one,
    /// no two alike.
    pub keys: Option<Vec<LitStr>>,
    /// The lease; a literal is never under 10 ms.
    pub lease: Option<DurationArg>,
    /// The wait; zero means try once.
    pub wait: Option<DurationArg>,
    /// Whether the watchdog renews the lease.
    pub renew: Option<(bool, Span)>,
    /// Reader or writer (`mode = "read"` / `"write"`).
    pub mode: Option<(ModeArg, Span)>,
    /// The number of holders of a counted lock.
    pub permits: Option<PermitsArg>,
    /// Whether waiters take the lock in arrival order.
    pub fair: Option<(bool, Span)>,
    /// How long a waiter's place lives without a heartbeat; a literal is
    /// never under 10 ms.
    pub waiter_lease: Option<DurationArg>,
    /// How long after its acquisition the lock stays taken, at least; a
    /// literal is never zero.
    pub hold_at_least: Option<DurationArg>,
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
        // Whether `key` or `keys` was written at all, even with a bad value.
        let mut key_seen = false;

        let parser = syn::meta::parser(|meta| {
            let Some(name) = meta.path.get_ident().map(ToString::to_string) else {
                return Err(unknown_option(&meta));
            };
            if !OPTIONS.contains(&name.as_str()) {
                return Err(unknown_option(&meta));
            }
            // Errors in reading the tokens stop here; errors in the value are
            // gathered below and parsing goes on with the next option.
            let value: Expr = meta.value()?.parse()?;
            key_seen |= name == "key" || name == "keys";
            args.set(&meta, &name, value, errors);
            Ok(())
        });
        if let Err(error) = parser.parse2(tokens) {
            // The options after the bad one were not read: `key` may be there.
            errors.push(error);
        } else if !key_seen {
            errors.push(syn::Error::new(
                Span::call_site(),
                "missing `key`: name the lock, e.g. \
                 `#[distributed_lock(key = \"order:<id>\")]`, or list the keys to take \
                 together, e.g. `#[distributed_lock(keys = [\"account:<from>\", \
                 \"account:<to>\"])]`",
            ));
        }
        args
    }

    /// Stores the value of the option `name`, or gathers its errors.
    fn set(&mut self, meta: &ParseNestedMeta<'_>, name: &str, value: Expr, errors: &mut Errors) {
        match name {
            "lease" => set_once(meta, &mut self.lease, duration_millis(value, name), errors),
            "wait" => set_once(meta, &mut self.wait, duration_millis(value, name), errors),
            "waiter_lease" => {
                let waiter_lease = duration_millis(value, name);
                set_once(meta, &mut self.waiter_lease, waiter_lease, errors);
            }
            "renew" => {
                let renew = bool_lit(value, name, "false");
                set_once(meta, &mut self.renew, renew, errors);
            }
            "key" | "keys" | "mode" | "permits" | "fair" | "hold_at_least" => {
                self.set_kind(meta, name, value, errors);
            }
            "client" => set_once(meta, &mut self.client, Ok(Box::new(value)), errors),
            _ => {
                let krate = crate_path(value, name);
                set_once(meta, &mut self.krate, krate, errors);
            }
        }
    }

    /// Stores `key`, `keys`, `mode`, `permits`, `fair` or `hold_at_least`.
    /// The first valid occurrence of one that cannot go with an option
    /// before it is an error spanned on the whole `name = value`.
    fn set_kind(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        name: &str,
        value: Expr,
        errors: &mut Errors,
    ) {
        let path = &meta.path;
        let written = quote!(#path #value);
        let before = self.kinds();
        match name {
            "key" => {
                let key = string_lit(value, name, "\"order:<id>\"");
                set_once(meta, &mut self.key, key, errors);
            }
            "keys" => set_once(meta, &mut self.keys, keys_array(value), errors),
            "mode" => set_once(meta, &mut self.mode, mode_lit(value), errors),
            "permits" => set_once(meta, &mut self.permits, permits_arg(value), errors),
            "hold_at_least" => {
                let hold = duration_millis(value, name);
                set_once(meta, &mut self.hold_at_least, hold, errors);
            }
            _ => set_once(meta, &mut self.fair, bool_lit(value, name, "true"), errors),
        }
        let after = self.kinds();
        // Set by this occurrence: not a duplicate, not a bad value.
        let Some(this) = after.iter().find(|kind| !before.contains(kind)) else {
            return;
        };
        // Any option set before that this one cannot go with.
        if let Some(message) = before.iter().find_map(|earlier| this.conflict(*earlier)) {
            errors.push(syn::Error::new_spanned(written, message));
        }
    }

    /// The options set so far that constrain the others.
    fn kinds(&self) -> Vec<Kind> {
        let mut kinds = Vec::new();
        if self.key.is_some() {
            kinds.push(Kind::Key);
        }
        if self.keys.is_some() {
            kinds.push(Kind::Keys);
        }
        match self.mode {
            Some((ModeArg::Read, _)) => kinds.push(Kind::ModeRead),
            Some((ModeArg::Write, _)) => kinds.push(Kind::ModeWrite),
            None => {}
        }
        if self.permits.is_some() {
            kinds.push(Kind::Permits);
        }
        if matches!(self.fair, Some((true, _))) {
            kinds.push(Kind::Fair);
        }
        if self.hold_at_least.is_some() {
            kinds.push(Kind::HoldAtLeast);
        }
        kinds
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
        format!(
            "unknown option `{name}`; expected `{}`",
            OPTIONS.join("`, `")
        ),
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

/// The templates in the array `value`, for `keys`: string literals, at
/// least one, each once. Each mistake is an error spanned on it.
fn keys_array(value: Expr) -> syn::Result<Vec<LitStr>> {
    let array = match value {
        Expr::Array(array) if array.attrs.is_empty() => array,
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit),
            attrs,
        }) if attrs.is_empty() => {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "`keys` takes an array of key templates: write `keys = [{}]`, or \
                     `key = {0}` for one key",
                    lit.token()
                ),
            ))
        }
        other => {
            return Err(syn::Error::new_spanned(
                other,
                "`keys` takes an array of string literals, one key template each: \
                 `keys = [\"account:<from>\", \"account:<to>\"]`",
            ))
        }
    };
    if array.elems.is_empty() {
        return Err(syn::Error::new_spanned(
            &array,
            "`keys` is empty: list the keys to take together, as in \
             `keys = [\"account:<from>\", \"account:<to>\"]`, or write `key = \"...\"` \
             for one key",
        ));
    }
    let mut errors = Errors::default();
    let mut templates: Vec<LitStr> = Vec::new();
    for element in array.elems {
        match element {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit),
                attrs,
            }) if attrs.is_empty() => {
                if templates
                    .iter()
                    .any(|earlier| earlier.value() == lit.value())
                {
                    errors.push(syn::Error::new(
                        lit.span(),
                        format!(
                            "the key template {} is listed twice in `keys`: remove this one \
                             (a call takes each key once)",
                            lit.token()
                        ),
                    ));
                } else {
                    templates.push(lit);
                }
            }
            other => errors.push(syn::Error::new_spanned(
                other,
                "`keys` takes string literals, one key template each: write this key as a \
                 string, as in `keys = [\"account:<from>\", \"account:<to>\"]`",
            )),
        }
    }
    errors.finish()?;
    Ok(templates)
}

/// The shortest lease, in milliseconds: the runtime's
/// `LockOptions::SHORTEST_LEASE`.
const SHORTEST_LEASE_MS: u64 = 10;

/// A duration string in milliseconds, for `lease` or `waiter_lease` (at
/// least 10 ms), `wait` or `hold_at_least` (not zero); any other expression
/// is kept for the call.
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
    if let Some(message) = too_short(name, millis) {
        return Err(syn::Error::new(lit.span(), message));
    }
    Ok(DurationArg::Millis(millis, lit.span()))
}

/// Why `millis` is too short for `name`, if it is: a `lease` or a
/// `waiter_lease` is at least 10 ms, a `hold_at_least` more than zero, a
/// `wait` may be zero.
fn too_short(name: &str, millis: u64) -> Option<String> {
    if millis >= SHORTEST_LEASE_MS {
        return None;
    }
    match (name, millis) {
        ("lease", 0) => Some(
            "`lease` must be greater than zero: give a duration such as \"30s\", \
             or leave `lease` out to use the client's default"
                .to_owned(),
        ),
        ("lease", _) => Some(format!(
            "`lease` must be at least 10ms: a lock is trusted for its lease less a \
             clock-drift margin (2 ms and a share of the lease), so a {millis} ms lease \
             would be lost as soon as it is taken; give a duration such as \"30s\""
        )),
        ("waiter_lease", 0) => Some(
            "`waiter_lease` must be greater than zero: give a duration such as \"5s\", \
             or leave `waiter_lease` out to use the default, 5s"
                .to_owned(),
        ),
        ("hold_at_least", 0) => Some(
            "`hold_at_least` must be greater than zero: with \"0s\" the lock is freed when \
             the body ends, the same as without the option; drop `hold_at_least`, or give \
             the time the lock must stay taken after it was acquired, such as \"1m\""
                .to_owned(),
        ),
        ("waiter_lease", _) => Some(format!(
            "`waiter_lease` must be at least 10ms: a waiter renews its place at a third of \
             it, so a {millis} ms waiter lease would run out between two renewals; give a \
             duration such as \"5s\""
        )),
        _ => None,
    }
}

/// The mode in the string literal `value`: `"read"` or `"write"`.
fn mode_lit(value: Expr) -> syn::Result<(ModeArg, Span)> {
    let lit = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit),
            attrs,
        }) if attrs.is_empty() => lit,
        other => {
            return Err(syn::Error::new_spanned(
                other,
                "`mode` takes the string \"read\" or \"write\": `mode = \"read\"` shares the \
                 key with other readers, `mode = \"write\"` excludes every other holder",
            ))
        }
    };
    match lit.value().as_str() {
        "read" => Ok((ModeArg::Read, lit.span())),
        "write" => Ok((ModeArg::Write, lit.span())),
        other => Err(syn::Error::new(
            lit.span(),
            format!(
                "unknown mode `{other}`: write `mode = \"read\"` to share the key with other \
                 readers, or `mode = \"write\"` to exclude every other holder (the same as \
                 no `mode`)"
            ),
        )),
    }
}

/// A count of holders for `permits`: an integer literal from 1 to
/// `u32::MAX`, checked here, or any other expression, kept for the call.
/// A negative or non-integer literal is an error.
fn permits_arg(value: Expr) -> syn::Result<PermitsArg> {
    match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => permits_count(lit),
        Expr::Lit(ExprLit { lit, .. }) => Err(syn::Error::new_spanned(
            lit,
            "`permits` takes the number of holders allowed at once, as a whole number \
             without quotes, such as `permits = 8`, or an expression of type `u32`",
        )),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) if matches!(**expr, Expr::Lit(_)) => Err(syn::Error::new_spanned(
            &value,
            "`permits` cannot be negative: it is the number of holders allowed at once, \
             at least 1, such as `permits = 8`",
        )),
        _ => Ok(PermitsArg::Expr(Box::new(value))),
    }
}

/// The count in the integer literal `lit`.
fn permits_count(lit: &LitInt) -> syn::Result<PermitsArg> {
    if !["", "u32"].contains(&lit.suffix()) {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`permits` takes a `u32`, not a `{}`: write the count without a suffix, \
                 such as `permits = 8`",
                lit.suffix()
            ),
        ));
    }
    let count = lit.base10_parse::<u32>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`permits = {}` is too large: `permits` is a `u32`, at most {}; give a \
                 smaller count, such as `permits = 8`",
                lit.base10_digits(),
                u32::MAX
            ),
        )
    })?;
    if count == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "`permits` must be at least 1: it is the number of holders allowed at once, and \
             `permits = 0` would let no one in; give a count such as `permits = 8`",
        ));
    }
    Ok(PermitsArg::Count(count, lit.span()))
}

/// The bool literal `value`; `example` is the value the error shows.
fn bool_lit(value: Expr, name: &str, example: &str) -> syn::Result<(bool, Span)> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(lit),
            attrs,
        }) if attrs.is_empty() => Ok((lit.value, lit.span)),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{name}` takes `true` or `false`, without quotes: `{name} = {example}`"),
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

/// A `lease`, `wait`, `waiter_lease` or `hold_at_least` as written.
pub(crate) enum DurationArg {
    /// A duration string, in milliseconds, with the literal's span.
    Millis(u64, Span),
    /// An expression of type `Duration`, evaluated at call time.
    Expr(Box<Expr>),
}

/// A `mode` as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModeArg {
    /// `"read"`: shared with other readers.
    Read,
    /// `"write"`: exclusive, the same as no mode.
    Write,
}

/// A `permits` as written.
pub(crate) enum PermitsArg {
    /// A count from 1 to `u32::MAX`, with the literal's span.
    Count(u32, Span),
    /// An expression of type `u32`, evaluated at call time.
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
