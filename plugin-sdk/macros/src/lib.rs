//! `#[reconciler]`: a reconcile function becomes a plugin. Owns only the
//! expansion; the SDK (`setpoint-plugin-sdk`) re-exports it and documents
//! it as `setpoint_plugin_sdk::reconciler`.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::quote;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{
    Error, FnArg, GenericArgument, Ident, ItemFn, Meta, PathArguments, Token, Type,
    parse_macro_input,
};

/// Turns `fn reconcile(object: &Object<Spec, Status>, ctx: &Ctx) ->
/// Result<Response<Status>, Error>` into a plugin: a unit struct (named by
/// `name = ...`, `Plugin` by default) implementing `Reconciler` with the
/// function's `Spec` and `Status` and the manifest of the function named by
/// `manifest = ...`, exported with `export_reconciler!`. The function stays
/// as written, so tests call it directly.
#[proc_macro_attribute]
pub fn reconciler(args: TokenStream, item: TokenStream) -> TokenStream {
    let function = parse_macro_input!(item as ItemFn);
    match expand(args.into(), &function) {
        Ok(tokens) => tokens.into(),
        Err(err) => {
            let err = err.to_compile_error();
            quote!(#function #err).into()
        }
    }
}

fn expand(
    args: proc_macro2::TokenStream,
    function: &ItemFn,
) -> syn::Result<proc_macro2::TokenStream> {
    let mut manifest = None;
    let mut name = Ident::new("Plugin", Span::call_site());
    for arg in Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)? {
        let Meta::NameValue(pair) = &arg else {
            return Err(Error::new_spanned(
                arg,
                "expected `manifest = fn_name` or `name = Type`",
            ));
        };
        let syn::Expr::Path(value) = &pair.value else {
            return Err(Error::new_spanned(&pair.value, "expected a name"));
        };
        if pair.path.is_ident("manifest") {
            manifest = Some(value.path.clone());
        } else if pair.path.is_ident("name") {
            name = value
                .path
                .get_ident()
                .cloned()
                .ok_or_else(|| Error::new_spanned(&value.path, "expected a type name"))?;
        } else {
            return Err(Error::new_spanned(
                &pair.path,
                "expected `manifest` or `name`",
            ));
        }
    }
    let manifest = manifest.ok_or_else(|| {
        Error::new(
            Span::call_site(),
            "name the manifest function: #[reconciler(manifest = manifest)]",
        )
    })?;
    let (spec, status) = object_types(function)?;
    let reconcile = &function.sig.ident;
    let vis = &function.vis;
    Ok(quote! {
        #function

        /// The plugin: the reconcile function and its manifest as a
        /// `Reconciler`.
        #[derive(Debug, Default)]
        #vis struct #name;

        impl ::setpoint_plugin_sdk::Reconciler for #name {
            type Spec = #spec;
            type Status = #status;

            fn manifest(&self) -> ::setpoint_plugin_sdk::Manifest {
                #manifest()
            }

            fn reconcile(
                &self,
                object: &::setpoint_plugin_sdk::Object<#spec, #status>,
                ctx: &::setpoint_plugin_sdk::Ctx,
            ) -> ::core::result::Result<::setpoint_plugin_sdk::Response<#status>, ::setpoint_plugin_sdk::Error> {
                #reconcile(object, ctx)
            }
        }

        ::setpoint_plugin_sdk::export_reconciler!(#name);
    })
}

/// `Spec` and `Status` of the first argument, `&Object<Spec, Status>`.
fn object_types(function: &ItemFn) -> syn::Result<(Type, Type)> {
    let wrong = || {
        Error::new_spanned(
            &function.sig,
            "a reconcile function takes (&Object<Spec, Status>, &Ctx)",
        )
    };
    let Some(FnArg::Typed(first)) = function.sig.inputs.first() else {
        return Err(wrong());
    };
    let Type::Reference(reference) = &*first.ty else {
        return Err(wrong());
    };
    let Type::Path(path) = &*reference.elem else {
        return Err(wrong());
    };
    let last = path.path.segments.last().ok_or_else(wrong)?;
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return Err(wrong());
    };
    let types: Vec<&Type> = args
        .args
        .iter()
        .filter_map(|arg| match arg {
            GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
        .collect();
    match types.as_slice() {
        [spec, status] if function.sig.inputs.len() == 2 => {
            Ok(((*spec).clone(), (*status).clone()))
        }
        _ => Err(wrong()),
    }
}
