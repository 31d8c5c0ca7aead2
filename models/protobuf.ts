// A minimal protobuf *writer*: just the wire types ONNX's ModelProto needs (varint, fixed32,
// length-delimited). Messages are built bottom-up: encode the child, then embed its bytes.
// Field order is the order of the calls, so the output is a pure function of the input.

const WIRE_VARINT = 0;
const WIRE_LEN = 2;
const WIRE_FIXED32 = 5;

const utf8 = new TextEncoder();

export class ProtoWriter {
  private readonly chunks: Uint8Array[] = [];
  private scratch: number[] = [];

  private flushScratch(): void {
    if (this.scratch.length > 0) {
      this.chunks.push(Uint8Array.from(this.scratch));
      this.scratch = [];
    }
  }

  private varint(value: number | bigint): void {
    // int64 semantics: negative numbers are sent as their 64-bit two's complement (10 bytes).
    let v = BigInt.asUintN(64, BigInt(value));
    do {
      let byte = Number(v & 0x7fn);
      v >>= 7n;
      if (v !== 0n) byte |= 0x80;
      this.scratch.push(byte);
    } while (v !== 0n);
  }

  private tag(field: number, wire: number): void {
    this.varint((field << 3) | wire);
  }

  /** int32 / int64 / enum / bool field. */
  int(field: number, value: number | bigint): this {
    if (typeof value === 'number' && !Number.isSafeInteger(value)) {
      throw new Error(`protobuf: field ${field} expects an integer, got ${value}`);
    }
    this.tag(field, WIRE_VARINT);
    this.varint(value);
    return this;
  }

  /** float (fixed32, little-endian). */
  float(field: number, value: number): this {
    this.tag(field, WIRE_FIXED32);
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, value, true);
    this.scratch.push(...b);
    return this;
  }

  bytes(field: number, value: Uint8Array): this {
    this.tag(field, WIRE_LEN);
    this.varint(value.length);
    this.flushScratch();
    this.chunks.push(value);
    return this;
  }

  string(field: number, value: string): this {
    return this.bytes(field, utf8.encode(value));
  }

  message(field: number, message: ProtoWriter): this {
    return this.bytes(field, message.finish());
  }

  /** repeated int64, packed (proto3 default for scalar repeated fields). */
  packedInts(field: number, values: readonly number[]): this {
    const inner = new ProtoWriter();
    for (const v of values) inner.varint(v);
    return this.bytes(field, inner.finish());
  }

  finish(): Uint8Array {
    this.flushScratch();
    if (this.chunks.length === 1 && this.chunks[0]) return this.chunks[0];
    const total = this.chunks.reduce((n, c) => n + c.length, 0);
    const out = new Uint8Array(total);
    let offset = 0;
    for (const c of this.chunks) {
      out.set(c, offset);
      offset += c.length;
    }
    this.chunks.length = 0;
    this.chunks.push(out);
    return out;
  }
}
