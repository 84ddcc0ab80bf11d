#!/usr/bin/env node
// Offline validation of Kubernetes manifests (the output of `kubectl kustomize`).
//   node validate.cjs FILE...        (FILE "-" = standard input; NODE_PATH names the node_modules
//                                     holding kubernetes-models and js-yaml)
// Each YAML document is checked three ways; exit status 0 only when all pass, 1 otherwise:
//  1. the OpenAPI schema of its apiVersion and kind (kubernetes-models: types, formats, enums,
//     required fields); a kind without a schema is an error;
//  2. unknown fields, as `kubectl apply --validate=strict` reports them: every field that the
//     schema's validator never looked at (a typo such as `replicsa` passes the schema alone);
//  3. references between the rendered objects that the API server would not check but the
//     pods need: selectors against pod labels, serviceName/subdomain against headless
//     Services, ConfigMaps, PVCs and ServiceAccounts used by pods, named ports of probes and
//     Services, volume mounts, $(VAR) in command and args. Secrets may live outside the
//     manifests (created with kubectl): they are listed, not required.
'use strict';
const fs = require('fs');
const yaml = require('js-yaml');

const errors = [];
const notes = [];
const err = (where, msg) => errors.push(`${where}: ${msg}`);

// ---- 1 + 2: schema and unknown fields -------------------------------------------------------

function modelClass(doc) {
  const [group, version] = doc.apiVersion.includes('/') ? doc.apiVersion.split('/') : [null, doc.apiVersion];
  let mod;
  try {
    mod = require(group ? `kubernetes-models/${group}/${version}` : `kubernetes-models/${version}`);
  } catch (e) {
    return null;
  }
  const cls = mod[doc.kind];
  // Nested types (Affinity, Container ...) are exported too; only top-level kinds carry these.
  return cls && cls.kind === doc.kind && cls.apiVersion === doc.apiVersion ? cls : null;
}

// Wraps a copy of obj in proxies that record which keys the validator read; a map-like object
// (labels, resources.limits ...) is enumerated by it instead.
function track(obj, path, seen) {
  if (obj === null || typeof obj !== 'object') return obj;
  const rec = { path, obj, read: new Set(), enumerated: false };
  seen.push(rec);
  const copy = Array.isArray(obj)
    ? obj.map((v, i) => track(v, `${path}/${i}`, seen))
    : Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, track(v, `${path}/${k}`, seen)]));
  return new Proxy(copy, {
    get(t, k, r) {
      if (typeof k === 'string') rec.read.add(k);
      return Reflect.get(t, k, r);
    },
    ownKeys(t) {
      rec.enumerated = true;
      return Reflect.ownKeys(t);
    },
  });
}

function checkSchema(doc, where) {
  const cls = modelClass(doc);
  if (!cls) {
    err(where, `no schema for apiVersion ${doc.apiVersion} kind ${doc.kind}`);
    return;
  }
  const seen = [];
  const proxy = track(doc, '', seen);
  try {
    cls.prototype.validate.call(proxy); // the generated validator, run on the tracked copy
  } catch (e) {
    err(where, `schema: ${e.message}`);
    return;
  }
  for (const r of seen) {
    if (Array.isArray(r.obj) || r.enumerated) continue;
    for (const k of Object.keys(r.obj))
      if (!r.read.has(k) && !(r.path === '' && (k === 'apiVersion' || k === 'kind')))
        err(where, `unknown field ${r.path}/${k}`);
  }
}

// ---- 3: references between objects ----------------------------------------------------------

function matches(selector, labels) {
  if (!selector) return false;
  labels = labels || {};
  for (const [k, v] of Object.entries(selector.matchLabels || {})) if (labels[k] !== v) return false;
  for (const e of selector.matchExpressions || []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    if (e.operator === 'In' && !(has && e.values.includes(labels[e.key]))) return false;
    if (e.operator === 'NotIn' && has && e.values.includes(labels[e.key])) return false;
    if (e.operator === 'Exists' && !has) return false;
    if (e.operator === 'DoesNotExist' && has) return false;
  }
  return true;
}

function podTemplate(doc) {
  if (['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet', 'Job'].includes(doc.kind))
    return doc.spec && doc.spec.template;
  if (doc.kind === 'CronJob') return doc.spec.jobTemplate.spec.template;
  if (doc.kind === 'Pod') return { metadata: doc.metadata, spec: doc.spec };
  return null;
}

function checkReferences(docs) {
  const byKind = (kind) => docs.filter((d) => d.kind === kind);
  const names = (kind) => new Set(byKind(kind).map((d) => d.metadata.name));
  const configMaps = names('ConfigMap');
  const pvcs = names('PersistentVolumeClaim');
  const accounts = names('ServiceAccount');
  const services = byKind('Service');
  const headless = (name) => services.find((s) => s.metadata.name === name && s.spec.clusterIP === 'None');
  const pods = docs.map((d) => ({ doc: d, tpl: podTemplate(d) })).filter((p) => p.tpl);
  const external = new Set();

  const seenNames = new Set();
  for (const d of docs) {
    const key = `${d.kind}/${d.metadata.namespace || ''}/${d.metadata.name}`;
    if (seenNames.has(key)) err(`${d.kind}/${d.metadata.name}`, 'defined twice');
    seenNames.add(key);
  }

  for (const { doc, tpl } of pods) {
    const where = `${doc.kind}/${doc.metadata.name}`;
    const labels = (tpl.metadata && tpl.metadata.labels) || {};
    const spec = tpl.spec;
    if (doc.kind !== 'Pod' && doc.kind !== 'Job' && doc.kind !== 'CronJob' && !matches(doc.spec.selector, labels))
      err(where, 'spec.selector does not match the pod template labels');
    if (doc.kind === 'StatefulSet') {
      if (!headless(doc.spec.serviceName))
        err(where, `serviceName ${doc.spec.serviceName} is not a headless Service of these manifests`);
    }
    if (doc.kind === 'Job') {
      if (doc.spec.completionMode === 'Indexed' && doc.spec.completions == null)
        err(where, 'an Indexed Job needs spec.completions');
      if (!['OnFailure', 'Never'].includes(spec.restartPolicy))
        err(where, `a Job's pods need restartPolicy OnFailure or Never, not ${spec.restartPolicy}`);
    }
    if (spec.subdomain) {
      const s = headless(spec.subdomain);
      if (!s) err(where, `subdomain ${spec.subdomain} is not a headless Service of these manifests`);
      else if (!matches({ matchLabels: s.spec.selector }, labels))
        err(where, `headless Service ${spec.subdomain} does not select these pods`);
    }
    const sa = spec.serviceAccountName;
    if (sa && sa !== 'default' && !accounts.has(sa)) err(where, `ServiceAccount ${sa} is not defined`);
    const claimTemplates = new Set(((doc.spec && doc.spec.volumeClaimTemplates) || []).map((c) => c.metadata.name));
    const volumes = new Set();
    for (const v of spec.volumes || []) {
      volumes.add(v.name);
      if (v.configMap && !configMaps.has(v.configMap.name) && !v.configMap.optional)
        err(where, `volume ${v.name}: ConfigMap ${v.configMap.name} is not defined`);
      if (v.persistentVolumeClaim && !pvcs.has(v.persistentVolumeClaim.claimName))
        err(where, `volume ${v.name}: PersistentVolumeClaim ${v.persistentVolumeClaim.claimName} is not defined`);
      if (v.secret) external.add(`Secret ${v.secret.secretName} (volume of ${where})`);
    }
    for (const c of [...(spec.initContainers || []), ...spec.containers]) {
      const cw = `${where} container ${c.name}`;
      for (const m of c.volumeMounts || [])
        if (!volumes.has(m.name) && !claimTemplates.has(m.name)) err(cw, `volumeMount ${m.name} names no volume`);
      const vars = new Set((c.env || []).map((e) => e.name));
      for (const e of c.env || []) {
        const ref = e.valueFrom && e.valueFrom.configMapKeyRef;
        if (ref && !configMaps.has(ref.name) && !ref.optional) err(cw, `env ${e.name}: ConfigMap ${ref.name} is not defined`);
        if (e.valueFrom && e.valueFrom.secretKeyRef) external.add(`Secret ${e.valueFrom.secretKeyRef.name} (env of ${cw})`);
      }
      for (const f of c.envFrom || []) {
        if (f.configMapRef) {
          const cm = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name === f.configMapRef.name);
          if (!cm) {
            if (!f.configMapRef.optional) err(cw, `envFrom: ConfigMap ${f.configMapRef.name} is not defined`);
          } else for (const k of Object.keys(cm.data || {})) vars.add((f.prefix || '') + k);
        }
        if (f.secretRef) external.add(`Secret ${f.secretRef.name} (envFrom of ${cw})`);
      }
      for (const a of [...(c.command || []), ...(c.args || [])])
        for (const m of String(a).matchAll(/(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g))
          if (!vars.has(m[1])) err(cw, `$(${m[1]}) in command/args is not an environment variable of the container`);
      const ports = new Set((c.ports || []).map((p) => p.name).filter(Boolean));
      for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) {
        const p = c[probe];
        const port = p && ((p.httpGet && p.httpGet.port) || (p.tcpSocket && p.tcpSocket.port));
        if (typeof port === 'string' && !ports.has(port)) err(cw, `${probe} names port ${port}, which the container does not declare`);
      }
    }
  }

  const selects = (selector, what, where, allowEmpty) => {
    const hit = pods.filter((p) => matches(selector, (p.tpl.metadata && p.tpl.metadata.labels) || {}));
    if (!hit.length && !allowEmpty) err(where, `${what} selects no pods of these manifests`);
    return hit;
  };
  for (const s of services) {
    const where = `Service/${s.metadata.name}`;
    if (!s.spec.selector) continue; // endpoints managed by hand
    const hit = selects({ matchLabels: s.spec.selector }, 'spec.selector', where);
    for (const p of s.spec.ports || []) {
      if (typeof p.targetPort !== 'string') continue;
      const ok = hit.some((h) => h.tpl.spec.containers.some((c) => (c.ports || []).some((cp) => cp.name === p.targetPort)));
      if (!ok) err(where, `targetPort ${p.targetPort} is not a named port of the selected pods`);
    }
  }
  for (const d of byKind('PodDisruptionBudget')) selects(d.spec.selector, 'spec.selector', `PodDisruptionBudget/${d.metadata.name}`);
  for (const d of byKind('NetworkPolicy')) {
    const where = `NetworkPolicy/${d.metadata.name}`;
    selects(d.spec.podSelector, 'spec.podSelector', where, Object.keys(d.spec.podSelector).length === 0);
    for (const rule of d.spec.ingress || [])
      for (const peer of rule.from || [])
        if (peer.podSelector && !peer.namespaceSelector) selects(peer.podSelector, 'an ingress podSelector', where);
  }
  for (const e of external) notes.push(`needs ${e}, created outside these manifests`);
}

// ---- main ------------------------------------------------------------------------------------

const files = process.argv.slice(2);
if (!files.length) {
  console.error('usage: validate.cjs FILE... (- = standard input)');
  process.exit(2);
}
const docs = [];
for (const f of files) {
  const text = fs.readFileSync(f === '-' ? 0 : f, 'utf8');
  let loaded;
  try {
    loaded = yaml.loadAll(text);
  } catch (e) {
    err(f, `YAML: ${e.message.split('\n')[0]}`);
    continue;
  }
  for (const d of loaded) {
    if (d === null || d === undefined) continue;
    if (typeof d !== 'object' || !d.apiVersion || !d.kind || !d.metadata || !d.metadata.name) {
      err(f, 'a document without apiVersion, kind and metadata.name');
      continue;
    }
    docs.push(d);
  }
}
const counts = {};
for (const d of docs) {
  checkSchema(d, `${d.kind}/${d.metadata.name}`);
  counts[d.kind] = (counts[d.kind] || 0) + 1;
}
if (!errors.length) checkReferences(docs);
for (const n of [...new Set(notes)].sort()) console.log(`note: ${n}`);
const summary = Object.entries(counts).map(([k, n]) => `${n} ${k}`).join(', ');
if (errors.length) {
  for (const e of errors) console.log(`error: ${e}`);
  console.log(`INVALID: ${errors.length} error(s) in ${docs.length} objects (${summary})`);
  process.exit(1);
}
if (!docs.length) {
  console.log('INVALID: no objects');
  process.exit(1);
}
console.log(`valid: ${docs.length} objects (${summary})`);
