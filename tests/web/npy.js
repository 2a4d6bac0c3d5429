// A minimal .npy reader for the arrays `qkv dump` writes (little-endian float32 / int32, C order).
'use strict';
const fs = require('fs');

function readNpy(file) {
  const b = fs.readFileSync(file);
  if (b.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = b[6];
  const hlen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = b.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  const off = start + hlen, n = shape.reduce((a, x) => a * x, 1);
  const raw = b.buffer.slice(b.byteOffset + off, b.byteOffset + off + 4 * n);
  if (descr === '<f4') return { shape, data: new Float32Array(raw) };
  if (descr === '<i4') return { shape, data: new Int32Array(raw) };
  throw new Error(`${file}: dtype ${descr} not supported`);
}

module.exports = { readNpy };
