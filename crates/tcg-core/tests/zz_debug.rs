mod common;
use common::*;
use std::sync::Arc;
use tcgkit_tcg_core::*;
struct I(Arc<Scoreboard>);
impl Instrumentation for I {
    fn translate(&self, _tb: &TbView<'_>, plan: &mut TbPlan) {
        for insn in plan.insns_mut() {
            insn.on_execute(Action::Inline(InlineOp { board: self.0.clone(), slot: 0, kind: InlineKind::Add(1) }));
        }
    }
}
#[test]
fn dbg() {
    let mut mem = machine(&loop_program(1000));
    let mut engine = Engine::new(Toy);
    engine.set_instrumentation(Some(Arc::new(I(Arc::new(Scoreboard::new(1, 1))))));
    for _ in 0..3 {
        let mut cpu = cpu_at(CODE);
        engine.run(&mut cpu, &mut mem);
        eprintln!("{:?}", engine.stats());
    }
}
