#!/usr/bin/env node
// The CLI is TypeScript run through tsx's loader, so the same sources serve development and production
// without a build step that could drift from them.
import { register } from 'tsx/esm/api';

register();
await import('../cli/main.ts');
