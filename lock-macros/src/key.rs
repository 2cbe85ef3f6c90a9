//! The key template: literal text with placeholders `<name>`, `<name.field>`
//! and `<self.field>`, turned into a format string and its arguments.

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::{FnArg, Ident, LitStr, Pat, Signature};

/// One part of a parsed template.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Text copied into the key as it is.
    Text(String),
    /// A placeholder: the argument (or `self`) followed by field names or
    /// tuple indices, as in `<order.customer.id>`.
    Placeholder(Vec<String>),
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
        pieces.push(Piece::Placeholder(parse_path(&inner_and_rest[..close])?));
        rest = &inner_and_rest[close + 1..];
    }
    Ok(pieces)
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
    let segments: Vec<String> = inner.split('.').map(str::to_owned).collect();
    let valid = is_identifier(&segments[0])
        && segments[1..]
            .iter()
            .all(|s| is_identifier(s) || is_tuple_index(s));
    if !valid {
        return Err(format!(
            "invalid placeholder `<{inner}>` in the key: write an argument name, \
             optionally followed by fields, as in `<id>`, `<order.id>` or `<self.id>`"
        ));
    }
    Ok(segments)
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

/// A template resolved against the function's signature: the arguments of
/// `format_args!`.
pub(crate) struct Key {
    /// The format string, with `{}` for each placeholder and braces escaped.
    pub format: LitStr,
    /// One expression per placeholder, spanned on the key literal.
    pub args: Vec<TokenStream>,
}

impl Key {
    /// Parses the template in `lit` and checks each placeholder against `sig`.
    /// All errors are spanned on `lit`, and all unknown placeholders are
    /// reported together.
    pub(crate) fn resolve(lit: &LitStr, sig: &Signature) -> syn::Result<Key> {
        let span = lit.span();
        let pieces = parse(&lit.value()).map_err(|message| syn::Error::new(span, message))?;
        let params = Params::of(sig);

        let mut format = String::new();
        let mut args = Vec::new();
        let mut errors = crate::args::Errors::default();
        for piece in pieces {
            match piece {
                Piece::Text(text) => format.push_str(&text.replace('{', "{{").replace('}', "}}")),
                Piece::Placeholder(path) => {
                    format.push_str("{}");
                    match params.check(&path, &sig.ident) {
                        Ok(()) => args.push(path_tokens(&path, span)),
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

/// What a placeholder may name: the arguments bound to a plain name, and
/// `self` if there is a receiver.
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
                FnArg::Typed(typed) => {
                    // `x`, `mut x`, `ref x`; not `(a, b)` or `_`.
                    if let Pat::Ident(pat) = &*typed.pat {
                        params.names.push(pat.ident.to_string());
                    }
                }
            }
        }
        params
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
        let mut usable: Vec<String> = self
            .names
            .iter()
            .map(|name| format!("`<{name}>`"))
            .collect();
        if self.receiver {
            usable.push("`<self.field>`".to_owned());
        }
        if usable.is_empty() {
            return "the function has no argument bound to a plain name \
                    (such as `id: u64`) that a key could use"
                .to_owned();
        }
        format!("{lead}: {}", usable.join(", "))
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
    use super::{parse, Key, Piece};

    fn text(s: &str) -> Piece {
        Piece::Text(s.to_owned())
    }

    fn placeholder(path: &[&str]) -> Piece {
        Piece::Placeholder(path.iter().map(|s| (*s).to_owned()).collect())
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
            parse("<a><b>"),
            Ok(vec![placeholder(&["a"]), placeholder(&["b"])])
        );
        assert_eq!(parse("<_x>"), Ok(vec![placeholder(&["_x"])]));
    }

    #[test]
    fn errors() {
        let message = |template: &str| parse(template).unwrap_err();
        assert!(message("").contains("empty"));
        assert!(message("a<>b").contains("empty placeholder"));
        assert!(message("order:<id").contains("unbalanced `<`"));
        assert!(message("order:<<id>").contains("unbalanced `<`"));
        assert!(message("order:id>").contains("unbalanced `>`"));
        assert!(message("<id>>").contains("unbalanced `>`"));
        for bad in [
            "< id>", "<id.>", "<.id>", "<a..b>", "<1a>", "<a.01>", "<_>", "<a-b>",
        ] {
            assert!(message(bad).contains("invalid placeholder"), "{bad}");
        }
    }

    fn resolve(template: &str, sig: &str) -> Result<(String, Vec<String>), String> {
        let sig: syn::Signature = syn::parse_str(sig).unwrap();
        let lit = syn::LitStr::new(template, proc_macro2::Span::call_site());
        Key::resolve(&lit, &sig)
            .map(|key| {
                let args = key
                    .args
                    .iter()
                    .map(|a| a.to_string().replace(' ', ""))
                    .collect();
                (key.format.value(), args)
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn resolves_against_the_signature() {
        assert_eq!(
            resolve(
                "{<id>}:<self.shop>:<order.line.0>",
                "async fn f(&self, mut id: u64, order: Order)"
            ),
            Ok((
                "{{{}}}:{}:{}".to_owned(),
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
    fn unknown_names_list_the_arguments() {
        let error =
            resolve("<idd>", "async fn f(id: u64, (a, b): (u8, u8), qty: u32)").unwrap_err();
        assert!(error.contains("no argument `idd`"), "{error}");
        assert!(error.contains("`<id>`, `<qty>`"), "{error}");
        let error = resolve("<x>", "async fn f()").unwrap_err();
        assert!(
            error.contains("no argument bound to a plain name"),
            "{error}"
        );
        let error = resolve("<self.id>", "async fn f(id: u64)").unwrap_err();
        assert!(error.contains("takes no `self`"), "{error}");
        assert!(resolve("<self.id>", "async fn f(self: Box<Self>)").is_ok());
    }
}
