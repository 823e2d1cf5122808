//! Credentials for the services the publisher talks to, shared by whichever part needs them
//! (a sink, the Kafka client): bearer tokens from Google's Application Default Credentials.
//! Imports nothing of the pipeline, so any stage may use it.

pub mod google;
pub mod kafka;
