// Checks custom objects with the validators that @kubernetes-models packages made from the projects' own published
// CRD schemas (packages and versions: package.json beside this file; the sources: ../SOURCE.md): the Prometheus
// Operator's (ServiceMonitor, AlertmanagerConfig), the Gateway API's (HTTPRoute) and KEDA's (ScaledObject).
// Run by infercast/tools/k8s/validate.py: a JSON array of objects on stdin, a JSON array of answers on stdout, one per
// object and in order: {"checked": true, "errors": [{"path": "spec/endpoints/0/interval", "message": "..."}]}, or
// {"checked": false} for a kind the package has no validator for.
//
// The validators check types, required fields, enums and patterns, but accept fields their schema does not list
// (the API server would prune those silently).  So each object is handed to them behind a Proxy that records which
// fields they read: a field in an object whose listed fields they looked up, but that they never read itself, is
// not in the schema and is reported as unknown.  An object whose schema lists no fields (a map, or a field kept
// as-is) has every key read (maps) or none looked up (free-form), so neither is judged.
import { readFileSync } from "node:fs";
import * as v1 from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import * as v1alpha1 from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1alpha1";
import * as gatewayV1 from "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1";
import * as kedaV1alpha1 from "@kubernetes-models/keda/keda.sh/v1alpha1";

const models = new Map();
for (const mod of [v1, v1alpha1, gatewayV1, kedaV1alpha1]) {
  for (const cls of Object.values(mod)) {
    if (typeof cls === "function" && cls.apiVersion && cls.kind) models.set(`${cls.apiVersion} ${cls.kind}`, cls);
  }
}

const isObject = (v) => v !== null && typeof v === "object";

function watched(value, reads, proxies) {
  if (!isObject(value)) return value;
  if (proxies.has(value)) return proxies.get(value);
  const seen = new Set();
  reads.set(value, seen);
  const proxy = new Proxy(value, {
    get(target, key, receiver) {
      const v = Reflect.get(target, key, receiver);
      if (typeof key !== "string") return v;
      if (!Array.isArray(target)) seen.add(key);
      return watched(v, reads, proxies);
    },
  });
  proxies.set(value, proxy);
  return proxy;
}

function unknownFields(value, path, reads, out) {
  if (Array.isArray(value)) {
    value.forEach((v, i) => unknownFields(v, `${path}/${i}`, reads, out));
  } else if (isObject(value)) {
    const seen = reads.get(value);
    for (const key of Object.keys(value)) {
      if (seen && seen.size && !seen.has(key)) {
        out.push({ path: `${path}/${key}`.slice(1), message: `unknown field "${key}" (not in the CRD schema)` });
      } else {
        unknownFields(value[key], `${path}/${key}`, reads, out);
      }
    }
  }
}

function check(obj) {
  const cls = isObject(obj) && models.get(`${obj.apiVersion} ${obj.kind}`);
  if (!cls) return { checked: false };
  const reads = new Map();
  const errors = [];
  // a shallow copy whose prototype is the model's: the older packages' validate() finds its schema through it
  const copy = Object.setPrototypeOf({ ...obj }, cls.prototype);
  try {
    cls.prototype.validate.call(watched(copy, reads, new Map()));
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    for (const err of e.errors) {
      let message = err.message;
      if (err.params?.allowedValues) message += `: ${JSON.stringify(err.params.allowedValues)}`;
      errors.push({ path: err.instancePath.slice(1), message });
    }
  }
  unknownFields(copy, "", reads, errors);
  return { checked: true, errors };
}

const objs = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(objs.map(check)));
