//! Routes as the router walks them: a tier is an ordered chain of resolved routes, each
//! with the endpoint that serves it and what its model can serve.

use crate::capability::ModelFacts;
use crate::vocab::Route;
use crate::wire::Endpoint;
use std::sync::Arc;

/// One route of a tier, resolved: the route, the endpoint that serves it, and what the
/// model can serve.
#[derive(Debug, Clone)]
pub struct RouteSpec {
    pub route: Route,
    pub endpoint: Arc<Endpoint>,
    pub facts: ModelFacts,
}

/// An ordered chain of routes.
#[derive(Debug, Clone)]
pub struct Tier {
    pub name: String,
    pub routes: Vec<RouteSpec>,
}
