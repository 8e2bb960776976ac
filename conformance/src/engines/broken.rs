//! Engines that misbehave on purpose, to check that the suite reports them and goes on:
//! one answers invalid text (whole or cut off), one panics, one hangs.

use crate::case::Constraint;
use crate::engine::{Engine, EngineError, Finish, Generation, Request};
use std::time::Duration;

/// How a [`BrokenEngine`] misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answers `}{` to everything, as a complete output.
    Invalid,
    /// Answers `}{` to everything, cut off by `max_new_tokens` (a prefix no constraint of
    /// the corpus but free text can complete).
    InvalidCutOff,
    /// Panics on every request.
    Panic,
    /// Never answers.
    Hang,
}

/// See the [module docs](self).
#[derive(Debug)]
pub struct BrokenEngine(pub Fault);

impl Engine for BrokenEngine {
    fn name(&self) -> String {
        format!("broken-{:?}", self.0).to_lowercase()
    }

    fn supports(&self, _: &Constraint) -> bool {
        true
    }

    fn generate(&mut self, requests: &[Request<'_>]) -> Vec<Result<Generation, EngineError>> {
        match self.0 {
            Fault::Invalid | Fault::InvalidCutOff => requests
                .iter()
                .map(|_| {
                    Ok(Generation {
                        text: "}{".into(),
                        finish: Some(if self.0 == Fault::Invalid { Finish::Stop } else { Finish::Length }),
                        tokens: 2,
                        ..Generation::default()
                    })
                })
                .collect(),
            Fault::Panic => panic!("a deliberately broken engine"),
            Fault::Hang => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
        }
    }
}
