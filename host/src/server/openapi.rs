//! OpenAPI documents for clients: `/openapi/v2` as the minimal protobuf
//! document kubectl needs for its client-side validation to pass, and
//! `/openapi/v3` with each group-version's registered schemas, so that
//! kubectl validates on the server (`fieldValidation`) and `kubectl explain`
//! works.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The gnostic protobuf `Document{swagger: "2.0"}`: every kubectl from 1.20
/// on accepts it, and finding no schemas in it, validates nothing itself.
const MINIMAL_V2: &[u8] = &[0x0A, 0x03, b'2', b'.', b'0'];

/// `GET /openapi/v2`, always as protobuf: the content type is the dotted
/// form (`…spec.v2.v1.0+protobuf`) because Go's MIME parser rejects the `@`
/// form kubectl sends in `Accept`.
pub(super) async fn v2() -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
        )],
        MINIMAL_V2,
    )
        .into_response()
}
