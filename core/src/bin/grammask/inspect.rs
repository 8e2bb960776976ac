//! `grammask inspect`: every intermediate form of a grammar.

use crate::GrammarArgs;
use clap::Args;
use grammask::automata::{Automata, AutomataLimits};
use grammask::grammar::ParseLimits;

#[derive(Args)]
pub struct InspectArgs {
    #[command(flatten)]
    grammar: GrammarArgs,
}

pub fn run(a: &InspectArgs) -> Result<(), String> {
    let g = a.grammar.spec()?.to_grammar(&ParseLimits::default()).map_err(|e| e.to_string())?;
    out!("# grammar IR ({} rules)\n{g}", g.rules.len());
    let auto = Automata::build(&g, &AutomataLimits::default()).map_err(|e| e.to_string())?;
    let o = auto.grammar();
    out!("# optimized IR ({} rules)\n{o}", o.rules.len());
    out!(
        "# automata ({} states, {} byte classes)\n{}",
        auto.num_states(),
        auto.num_byte_classes(),
        auto.dump()
    );
    Ok(())
}
