//! Credentials for the services the publisher talks to, shared by whichever part needs them
//! (a sink, the Kafka client): bearer tokens from Google's Application Default Credentials, and
//! Alibaba Cloud access keys from a static pair or Alibaba's default credential chain.
//! Imports nothing of the pipeline, so any stage may use it.

pub mod alibaba;
pub mod google;
pub mod kafka;
pub mod kafka_admin;
pub mod kafka_unsecured;
