#!/usr/bin/env node
// Compares conformance runs scenario by scenario.
//
//   node report.mjs REQUIREMENTS.yaml SUMMARY.json NAME=RESULTS_DIR [NAME=RESULTS_DIR ...]
//
// RESULTS_DIR is what `conformance server -o DIR` wrote: one
// `server-<scenario>-<timestamp>/checks.json` per scenario run. A scenario
// passes, as the suite itself scores it, when none of its checks has status
// FAILURE (WARNING/INFO/SKIPPED do not fail it). Only the revision's required
// server scenarios count; a required scenario with no checks.json is a failure.
// Prints the table and every failing check, writes SUMMARY.json, and exits 1
// unless every run passes every required scenario.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

// `yaml` is the suite's own dependency (pinned by package-lock.json); the
// requirements file it ships is the authority on what is required.
import YAML from 'yaml';

const [requirementsPath, summaryPath, ...runArgs] = process.argv.slice(2);
if (!requirementsPath || !summaryPath || runArgs.length === 0) {
    console.error('usage: report.mjs REQUIREMENTS.yaml SUMMARY.json NAME=DIR...');
    process.exit(2);
}

const required = YAML.parse(readFileSync(requirementsPath, 'utf8')).server;
const runs = runArgs.map(arg => {
    const [name, dir] = arg.split(/=(.*)/s);
    return { name, scenarios: readRun(dir) };
});

// scenario name -> its checks (the last run of it, if a dir holds several).
function readRun(dir) {
    const scenarios = new Map();
    if (!existsSync(dir)) return scenarios;
    for (const entry of readdirSync(dir).sort()) {
        const m = entry.match(/^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$/);
        const file = join(dir, entry, 'checks.json');
        if (m && existsSync(file)) scenarios.set(m[1], JSON.parse(readFileSync(file, 'utf8')));
    }
    return scenarios;
}

function verdict(checks) {
    if (!checks) return { pass: false, label: 'MISSING', failures: [{ id: '(no checks.json)', errorMessage: 'scenario did not run' }] };
    const failures = checks.filter(c => c.status === 'FAILURE');
    const warnings = checks.filter(c => c.status === 'WARNING').length;
    if (failures.length > 0) return { pass: false, label: `FAIL ${failures.length}`, failures };
    return { pass: true, label: warnings ? `pass (${warnings}w)` : 'pass', failures };
}

const width = Math.max(...required.map(s => s.length), 'scenario'.length) + 2;
const col = 12;
console.log('\n' + 'scenario'.padEnd(width) + runs.map(r => r.name.padEnd(col)).join(''));
console.log('-'.repeat(width + col * runs.length));
const summary = { required: required.length, runs: {} };
for (const run of runs) summary.runs[run.name] = { passed: 0, failed: [], scenarios: {} };

for (const scenario of required) {
    const cells = runs.map(run => {
        const v = verdict(run.scenarios.get(scenario));
        const s = summary.runs[run.name];
        s.scenarios[scenario] = { pass: v.pass, failures: v.failures.map(f => ({ id: f.id, errorMessage: f.errorMessage })) };
        if (v.pass) s.passed++;
        else s.failed.push(scenario);
        return v.label.padEnd(col);
    });
    console.log(scenario.padEnd(width) + cells.join(''));
}
console.log('-'.repeat(width + col * runs.length));
console.log('required passed'.padEnd(width) + runs.map(r => `${summary.runs[r.name].passed}/${required.length}`.padEnd(col)).join(''));

for (const run of runs) {
    const s = summary.runs[run.name];
    if (s.failed.length === 0) continue;
    console.log(`\nFailing checks, ${run.name}:`);
    for (const scenario of s.failed) {
        for (const f of s.scenarios[scenario].failures) {
            const message = String(f.errorMessage ?? '').replace(/\s+/g, ' ');
            console.log(`  ${scenario} / ${f.id}: ${message.length > 300 ? message.slice(0, 300) + '…' : message}`);
        }
    }
}

writeFileSync(summaryPath, JSON.stringify(summary, null, 2) + '\n');
const allPass = runs.every(r => summary.runs[r.name].failed.length === 0);
console.log(`\n${allPass ? 'PASS' : 'FAIL'}: ${runs.map(r => `${r.name} ${summary.runs[r.name].passed}/${required.length}`).join(', ')}`);
process.exit(allPass ? 0 : 1);
