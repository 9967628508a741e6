// Import rules checked in `npm test` (scripts/run-tests.mjs runs depcruise before the tests).
const FOLDERS = 'contract|emitter|collector|pipeline|queries|dashboards|cli|common';
module.exports = {
  forbidden: [
    {
      name: 'no-cycles',
      severity: 'error',
      comment: 'A cycle, even of types only, makes two files one unit that cannot be read or changed alone.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'folders-through-their-index',
      severity: 'error',
      comment:
        'A folder is used through its index.ts; its other files are its own business (CONTRIBUTING.md). common/ is the ' +
        'exception: a set of small independent modules (errors, config, http, ...), imported one by one so that the ' +
        "contract's users do not load every client library through common's index.",
      from: { path: `^(${FOLDERS})/`, pathNot: '\\.test\\.ts$' },
      to: { path: `^(${FOLDERS})/(?!index\\.ts$)`, pathNot: ['^$1/', '^common/'] },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|\\.scratch|\\.data|dist|bench)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js', '.mjs'] },
  },
};
