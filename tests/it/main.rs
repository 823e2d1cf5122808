
mod bootstrap;
