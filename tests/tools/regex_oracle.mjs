// JavaScript's RegExp as the oracle of test_regex: reads [{p, s, m}] from
// the file named, tests each s against new RegExp(p, "u"), and exits 1
// when any verdict differs from m (the automaton's), printing the first.
import { readFileSync } from 'node:fs';

const cases = JSON.parse(readFileSync(process.argv[2], 'utf8'));
let bad = 0;
for (const c of cases) {
  const got = new RegExp(c.p, 'u').test(c.s);
  if (got !== c.m && ++bad <= 20)
    console.log(`disagree: /${c.p}/u on ${JSON.stringify(c.s)}: JavaScript ${got}, the automaton ${c.m}`);
}
console.log(`regex oracle: ${cases.length} cases, ${bad} disagree`);
process.exit(bad ? 1 : 0);
