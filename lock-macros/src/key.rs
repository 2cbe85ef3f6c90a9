//! The key template: literal text with placeholders `<name>`, `<name.field>`
//! and `<self.field>` (each optionally `:?` for `Debug`), turned into a
//! format string and its arguments.
//!
//! Text outside placeholders is copied as it is, braces included, so a Redis
//! Cluster hash tag is written `{<tenant>}:order:<id>`. Two mistakes are
//! refused: `{name}` around an argument's name (the format-string habit,
//! which would lock the literal text: one lock for every call), and two
//! placeholders with nothing between them (`<a><b>` renders `1`,`23` and
//! `12`,`3` alike).

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::{FnArg, Ident, LitStr, Pat, Signature};

/// One part of a parsed template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Text copied into the key as it is.
    Text(String),
    /// A placeholder.
    Placeholder(Placeholder),
}

/// A placeholder: the argument (or `self`) followed by field names or tuple
/// indices, as in `<order.customer.id>`, rendered with `Display`, or with
/// `Debug` when written `<order:?>`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Placeholder {
    /// The argument, then the fields.
    pub path: Vec<String>,
    /// Whether it was written with `:?`.
    pub debug: bool,
}

/// Splits `template` into text and placeholders.
///
/// Every `<` opens a placeholder closed by the next `>`; the key may not hold
/// a literal `<` or `>`. The error is the message for the user.
pub(crate) fn parse(template: &str) -> Result<Vec<Piece>, String> {
    if template.is_empty() {
        return Err("the lock key is empty: give the lock a name, \
                    as in `key = \"order:<id>\"`"
            .to_owned());
    }
    let mut pieces = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        let Some(open) = rest.find(['<', '>']) else {
            pieces.push(Piece::Text(rest.to_owned()));
            break;
        };
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_owned()));
        }
        if rest[open..].starts_with('>') {
            return Err(format!(
                "unbalanced `>` in the key `{template}`: placeholders are written `<name>`, \
                 and a key cannot contain `<` or `>` otherwise"
            ));
        }
        let inner_and_rest = &rest[open + 1..];
        let close = match inner_and_rest.find(['<', '>']) {
            Some(close) if inner_and_rest[close..].starts_with('>') => close,
            _ => {
                return Err(format!(
                    "unbalanced `<` in the key `{template}`: close the placeholder with `>`, \
                     as in `<id>`; a key cannot contain `<` or `>` otherwise"
                ))
            }
        };
        let placeholder = parse_placeholder(&inner_and_rest[..close])?;
        if let Some(Piece::Placeholder(before)) = pieces.last() {
            return Err(format!(
                "placeholders `<{}>` and `<{}>` touch in the key `{template}`: put a separator \
                 between them, as in `<{0}>:<{1}>`; otherwise values such as `1`, `23` and \
                 `12`, `3` would render the same key and share one lock",
                before.path.join("."),
                placeholder.path.join("."),
            ));
        }
        pieces.push(Piece::Placeholder(placeholder));
        rest = &inner_and_rest[close + 1..];
    }
    Ok(pieces)
}

/// Parses the inside of a placeholder: a path, optionally followed by `:?`.
fn parse_placeholder(inner: &str) -> Result<Placeholder, String> {
    let (path, debug) = match inner.split_once(':') {
        Some((path, "?")) => (path, true),
        Some((path, spec)) => {
            return Err(format!(
                "unsupported format `:{spec}` in the placeholder `<{inner}>`: write `<{path}>` \
                 to render it with `Display`, or `<{path}:?>` to render it with `Debug`"
            ))
        }
        None => (inner, false),
    };
    Ok(Placeholder {
        path: parse_path(path)?,
        debug,
    })
}

/// Splits the inside of a placeholder into its segments, checking each one.
fn parse_path(inner: &str) -> Result<Vec<String>, String> {
    if inner.is_empty() {
        return Err(
            "empty placeholder `<>` in the key: write an argument name inside, \
                    as in `<id>`, or remove it"
                .to_owned(),
        );
    }
    let segments = split_path(inner).ok_or_else(|| {
        format!(
            "invalid placeholder `<{inner}>` in the key: write an argument name, \
             optionally followed by fields, as in `<id>`, `<order.id>` or `<self.id>`, \
             and `:?` to render it with `Debug`, as in `<id:?>`"
        )
    })?;
    Ok(segments)
}

/// The segments of `name.field.0`, or `None` if it is not such a path.
fn split_path(inner: &str) -> Option<Vec<String>> {
    let segments: Vec<String> = inner.split('.').map(str::to_owned).collect();
    let valid = is_identifier(&segments[0])
        && segments[1..]
            .iter()
            .all(|s| is_identifier(s) || is_tuple_index(s));
    valid.then_some(segments)
}

/// Whether `s` is a Rust identifier, keywords included (they simply match no
/// argument, except `self`); raw identifiers and `_` are not.
fn is_identifier(s: &str) -> bool {
    use syn::ext::IdentExt;
    use syn::parse::Parser;
    s != "_"
        && !s.starts_with("r#")
        && !s.contains(char::is_whitespace)
        && Ident::parse_any.parse_str(s).is_ok()
}

/// Whether `s` is a tuple index such as `0` or `12` (no leading zero).
fn is_tuple_index(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

/// The first `{...}` in `text` whose inside names an argument, `self` or a
/// field of one (optionally with a format spec, as in `{id:?}`): the
/// format-string habit. Gives the inside as written and the placeholder to
/// write instead.
fn braced_argument(text: &str, params: &Params) -> Option<(String, String)> {
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find(['{', '}'])?;
        if after[close..].starts_with('}') {
            let inside = &after[..close];
            let (path, spec) = match inside.split_once(':') {
                Some((path, spec)) => (path.trim(), spec.trim()),
                None => (inside.trim(), ""),
            };
            if let Some(segments) = split_path(path) {
                if params.names_root(&segments[0]) {
                    let debug = if spec.contains('?') { ":?" } else { "" };
                    return Some((inside.to_owned(), format!("<{path}{debug}>")));
                }
            }
        }
        rest = &after[close..];
    }
    None
}

/// A template resolved against the function's signature: the arguments of
/// `format_args!`.
pub(crate) struct Key {
    /// The format string, with `{}` (or `{:?}`) for each placeholder and
    /// braces escaped.
    pub format: LitStr,
    /// One expression per placeholder, spanned on the key literal.
    pub args: Vec<KeyArg>,
}

/// The expression of one placeholder and how it is rendered.
pub(crate) struct KeyArg {
    /// `id`, `self.shop`, `order.line.0`.
    pub expr: TokenStream,
    /// Rendered with `Debug` (`<id:?>`) rather than `Display`.
    pub debug: bool,
}

impl Key {
    /// Parses the template in `lit` and checks each placeholder against `sig`
    /// and `more_names` (bound in the body before the lock, by async-trait).
    /// All errors are spanned on `lit`, and all unknown placeholders are
    /// reported together.
    pub(crate) fn resolve(
        lit: &LitStr,
        sig: &Signature,
        more_names: Vec<String>,
    ) -> syn::Result<Key> {
        let span = lit.span();
        let pieces = parse(&lit.value()).map_err(|message| syn::Error::new(span, message))?;
        let mut params = Params::of(sig);
        for name in more_names {
            if !params.names.contains(&name) {
                params.names.push(name);
            }
        }

        let mut format = String::new();
        let mut args = Vec::new();
        let mut errors = crate::args::Errors::default();
        for piece in pieces {
            match piece {
                Piece::Text(text) => {
                    if let Some((inside, instead)) = braced_argument(&text, &params) {
                        errors.push(syn::Error::new(
                            span,
                            format!(
                                "`{{{inside}}}` in the key is literal text, not a placeholder, \
                                 so every call would take the same lock: write `{instead}` to \
                                 put the value in the key (placeholders use `<>`; braces stay \
                                 literal, so `{{{instead}}}` puts braces around the value, as \
                                 a Redis Cluster hash tag)"
                            ),
                        ));
                    }
                    format.push_str(&text.replace('{', "{{").replace('}', "}}"));
                }
                Piece::Placeholder(Placeholder { path, debug }) => {
                    format.push_str(if debug { "{:?}" } else { "{}" });
                    match params.check(&path, &sig.ident) {
                        Ok(()) => args.push(KeyArg {
                            expr: path_tokens(&path, span),
                            debug,
                        }),
                        Err(message) => errors.push(syn::Error::new(span, message)),
                    }
                }
            }
        }
        errors.finish()?;
        Ok(Key {
            format: LitStr::new(&format, span),
            args,
        })
    }
}

/// What a placeholder may name: the names the arguments bind (`id`, `mut id`,
/// and the names inside patterns such as `Path(id)` or `(a, b)`), and `self`
/// if there is a receiver.
struct Params {
    names: Vec<String>,
    receiver: bool,
}

impl Params {
    fn of(sig: &Signature) -> Params {
        let mut params = Params {
            names: Vec::new(),
            receiver: false,
        };
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(_) => params.receiver = true,
                FnArg::Typed(typed) => bound_names(&typed.pat, &mut params.names),
            }
        }
        params
    }

    /// Whether `root` is `self` in a method or a name an argument binds.
    fn names_root(&self, root: &str) -> bool {
        (root == "self" && self.receiver) || self.names.iter().any(|name| name == root)
    }

    /// Checks that the first segment of `path` names an argument.
    fn check(&self, path: &[String], function: &Ident) -> Result<(), String> {
        let root = path[0].as_str();
        if root == "self" {
            if self.receiver {
                return Ok(());
            }
            return Err(format!(
                "placeholder `<{}>` uses `self`, but `{function}` takes no `self`: \
                 use it in a method with `&self`, `&mut self` or `self`, or use {}",
                path.join("."),
                self.listing("an argument instead")
            ));
        }
        if self.names.iter().any(|name| name == root) {
            return Ok(());
        }
        Err(format!(
            "unknown placeholder `<{}>`: `{function}` has no argument `{root}`; {}",
            path.join("."),
            self.listing("use one of its arguments")
        ))
    }

    /// Lists what placeholders may name, for error messages.
    fn listing(&self, lead: &str) -> String {
        // `__self` and `__arg1` are async-trait's names, not the user's.
        let mut usable: Vec<String> = self
            .names
            .iter()
            .filter(|name| !name.starts_with("__"))
            .map(|name| format!("`<{name}>`"))
            .collect();
        if self.receiver {
            usable.push("`<self.field>`".to_owned());
        }
        if usable.is_empty() {
            return "the function has no argument bound to a name \
                    (such as `id: u64` or `Path(id): Path<u64>`) that a key could use"
                .to_owned();
        }
        format!("{lead}: {}", usable.join(", "))
    }
}

/// Adds the names that `pat` binds to `names`: `x`, `mut x`, `ref x`, and
/// the names inside tuple, struct, tuple-struct, slice and reference
/// patterns. `_` and `..` bind nothing.
pub(crate) fn bound_names(pat: &Pat, names: &mut Vec<String>) {
    match pat {
        Pat::Ident(pat) => {
            names.push(pat.ident.to_string());
            if let Some((_, sub)) = &pat.subpat {
                bound_names(sub, names);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::Struct(strukt) => strukt
            .fields
            .iter()
            .for_each(|field| bound_names(&field.pat, names)),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| bound_names(p, names)),
        Pat::Reference(reference) => bound_names(&reference.pat, names),
        Pat::Paren(paren) => bound_names(&paren.pat, names),
        Pat::Type(typed) => bound_names(&typed.pat, names),
        _ => {}
    }
}

/// The expression `root.field.0...` for a checked placeholder path, every
/// token spanned on the key literal so that type errors (such as a missing
/// `Display` impl) point there.
fn path_tokens(path: &[String], span: Span) -> TokenStream {
    let root = Ident::new(&path[0], span);
    let fields = path[1..].iter().map(|segment| {
        let member = match segment.parse::<u32>() {
            Ok(index) => syn::Member::Unnamed(syn::Index { index, span }),
            Err(_) => syn::Member::Named(Ident::new(segment, span)),
        };
        let dot = syn::Token![.](span);
        quote!(#dot #member)
    });
    let mut tokens = root.into_token_stream();
    tokens.extend(fields);
    tokens
}

#[cfg(test)]
mod tests {
    use super::{parse, Key, Piece, Placeholder};

    fn text(s: &str) -> Piece {
        Piece::Text(s.to_owned())
    }

    fn placeholder(path: &[&str]) -> Piece {
        Piece::Placeholder(Placeholder {
            path: path.iter().map(|s| (*s).to_owned()).collect(),
            debug: false,
        })
    }

    fn debug(path: &[&str]) -> Piece {
        Piece::Placeholder(Placeholder {
            path: path.iter().map(|s| (*s).to_owned()).collect(),
            debug: true,
        })
    }

    #[test]
    fn text_only() {
        assert_eq!(parse("jobs:nightly"), Ok(vec![text("jobs:nightly")]));
    }

    #[test]
    fn placeholders_and_paths() {
        assert_eq!(
            parse("order:<id>:<self.shop>:<req.user.id>-<pair.0>"),
            Ok(vec![
                text("order:"),
                placeholder(&["id"]),
                text(":"),
                placeholder(&["self", "shop"]),
                text(":"),
                placeholder(&["req", "user", "id"]),
                text("-"),
                placeholder(&["pair", "0"]),
            ])
        );
        assert_eq!(
            parse("<a>.<b:?>"),
            Ok(vec![placeholder(&["a"]), text("."), debug(&["b"])])
        );
        assert_eq!(parse("<_x>"), Ok(vec![placeholder(&["_x"])]));
        assert_eq!(
            parse("{<t>}:<o.id:?>"),
            Ok(vec![
                text("{"),
                placeholder(&["t"]),
                text("}:"),
                debug(&["o", "id"])
            ])
        );
    }

    #[test]
    fn errors() {
        let message = |template: &str| parse(template).unwrap_err();
        assert!(message("").contains("empty"));
        assert!(message("a<>b").contains("empty placeholder"));
        assert!(message("a<:?>b").contains("empty placeholder"));
        assert!(message("order:<id").contains("unbalanced `<`"));
        assert!(message("order:<<id>").contains("unbalanced `<`"));
        assert!(message("order:id>").contains("unbalanced `>`"));
        assert!(message("<id>>").contains("unbalanced `>`"));
        assert!(message("<a><b>").contains("`<a>` and `<b>` touch"));
        assert!(message("<a:?><b>").contains("`<a>` and `<b>` touch"));
        assert!(message("<id:x>").contains("unsupported format `:x`"));
        assert!(message("<id:#?>").contains("unsupported format `:#?`"));
        for bad in [
            "< id>", "<id.>", "<.id>", "<a..b>", "<1a>", "<a.01>", "<_>", "<a-b>", "<id:?:?>",
        ] {
            let error = message(bad);
            assert!(
                error.contains("invalid placeholder") || error.contains("unsupported format"),
                "{bad}: {error}"
            );
        }
    }

    fn resolve(template: &str, sig: &str) -> Result<(String, Vec<String>), String> {
        let sig: syn::Signature = syn::parse_str(sig).unwrap();
        let lit = syn::LitStr::new(template, proc_macro2::Span::call_site());
        Key::resolve(&lit, &sig, Vec::new())
            .map(|key| {
                let args = key
                    .args
                    .iter()
                    .map(|a| a.expr.to_string().replace(' ', ""))
                    .collect();
                (key.format.value(), args)
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn resolves_against_the_signature() {
        assert_eq!(
            resolve(
                "{<id>}:<self.shop>:<order.line.0:?>",
                "async fn f(&self, mut id: u64, order: Order)"
            ),
            Ok((
                "{{{}}}:{}:{:?}".to_owned(),
                vec![
                    "id".to_owned(),
                    "self.shop".to_owned(),
                    "order.line.0".to_owned()
                ]
            ))
        );
        assert_eq!(
            resolve("static}", "async fn f()"),
            Ok(("static}}".to_owned(), vec![]))
        );
    }

    #[test]
    fn names_bound_by_patterns() {
        let sig = "async fn f(Path(id): Path<u64>, (a, [b, ..]): (u8, [u8; 2]), \
                   Json(Order { customer, line: l, .. }): Json<Order>, &x: &u8, _: u8, \
                   whole @ Wrap(inner): Wrap)";
        for name in ["id", "a", "b", "customer", "l", "x", "whole", "inner"] {
            assert!(resolve(&format!("<{name}>"), sig).is_ok(), "{name}");
        }
        let error = resolve("<line>", sig).unwrap_err();
        assert!(
            error.contains("`<id>`, `<a>`, `<b>`, `<customer>`, `<l>`"),
            "{error}"
        );
    }

    #[test]
    fn braces_around_an_argument_are_refused() {
        let sig = "async fn f(&self, id: u64, order: Order)";
        for (template, instead) in [
            ("order:{id}", "<id>"),
            ("order:{ id }", "<id>"),
            ("order:{id:?}", "<id:?>"),
            ("order:{order.customer}", "<order.customer>"),
            ("{self.shop}:<id>", "<self.shop>"),
            ("<id>:{id}", "<id>"),
            ("{{id}}", "<id>"),
        ] {
            let error = resolve(template, sig).unwrap_err();
            assert!(error.contains("literal text"), "{template}: {error}");
            assert!(
                error.contains(&format!("write `{instead}`")),
                "{template}: {error}"
            );
        }
        // Braces around anything else are literal text: hash tags, `{}`.
        for template in [
            "{shop}:<id>",
            "{<id>}:x",
            "static-{}",
            "{idd}",
            "{self}",
            "{id",
        ] {
            let ok = resolve(template, "async fn f(id: u64)");
            assert!(ok.is_ok(), "{template}: {ok:?}");
        }
    }

    #[test]
    fn unknown_names_list_the_arguments() {
        let error =
            resolve("<idd>", "async fn f(id: u64, (a, b): (u8, u8), qty: u32)").unwrap_err();
        assert!(error.contains("no argument `idd`"), "{error}");
        assert!(error.contains("`<id>`, `<a>`, `<b>`, `<qty>`"), "{error}");
        let error = resolve("<x>", "async fn f()").unwrap_err();
        assert!(error.contains("no argument bound to a name"), "{error}");
        let error = resolve("<self.id>", "async fn f(id: u64)").unwrap_err();
        assert!(error.contains("takes no `self`"), "{error}");
        assert!(resolve("<self.id>", "async fn f(self: Box<Self>)").is_ok());
    }
}
