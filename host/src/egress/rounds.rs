//! Effect rounds: a response that wants reads it has no answer to gets
//! them performed, and the reconciler is called again with the answers, a
//! bounded number of times. The controller and plans both run a
//! reconcile this way.

use super::{Egress, Report, Scope};
use crate::contract::{HttpRequest, ReconcileError, Request, Response};
use crate::object::ObjectKey;

/// The key `describe` finds an object's recent requests by.
pub fn recent_key(kind: &str, key: &ObjectKey) -> String {
    format!("{kind}/{key}")
}

/// The reads of `response` that `request` has no answer to.
fn unanswered<'a>(request: &Request, response: &'a Response) -> Vec<&'a HttpRequest> {
    response
        .observe
        .iter()
        .filter(|r| !request.observations.iter().any(|(id, _)| *id == r.id))
        .collect()
}

/// Call the reconciler again while its response wants reads it has no
/// answer to: perform them, add the answers to the request and call again,
/// at most `max_rounds` calls in all. `call` makes one call.
pub(crate) async fn rounds<F, Fut>(
    egress: &Egress,
    scope: &Scope<'_>,
    mut request: Request,
    mut response: Response,
    report: &mut Report,
    call: F,
) -> Result<(Request, Response), ReconcileError>
where
    F: Fn(Request) -> Fut,
    Fut: std::future::Future<
            Output = Result<(Request, Result<Response, ReconcileError>), ReconcileError>,
        >,
{
    let config = egress.config();
    loop {
        check_sizes(config.max_requests, &response)?;
        let wanted: Vec<_> = unanswered(&request, &response)
            .into_iter()
            .cloned()
            .collect();
        if wanted.is_empty() {
            return Ok((request, response));
        }
        if request.round + 1 >= config.max_rounds {
            return Err(ReconcileError::Transient(format!(
                "the reconciler still wants reads after {} calls ({}); \
                 ask for reads together (fetch_all) or in fewer steps",
                config.max_rounds,
                wanted
                    .iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let answers = egress.observe(scope, &wanted, report).await;
        request.observations.extend(answers);
        request.round += 1;
        let (back, result) = call(request).await?;
        request = back;
        response = result?;
    }
}

fn check_sizes(max: usize, response: &Response) -> Result<(), ReconcileError> {
    for (list, n) in [
        ("observe", response.observe.len()),
        ("effects", response.effects.len()),
    ] {
        if n > max {
            return Err(ReconcileError::Permanent(format!(
                "the response asks for {n} {list} requests, over the limit of {max}"
            )));
        }
    }
    Ok(())
}
