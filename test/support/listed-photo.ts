// The photo the hash-list tests list, by the PDQ of a copy of it (the way a hash-sharing programme lists
// what it has seen), and a photo that is not listed.

import { readFileSync } from 'node:fs';
import sharp from 'sharp';
import { decodeRgb } from '../../services/detect/image/decode.ts';
import { pdqOfFrame } from '../../services/detect/image/pdq.ts';
import { probeHeader } from '../../services/detect/image/probe.ts';
import { fixture } from '../fixtures/corpus.ts';

export const LISTED_PHOTO = readFileSync(fixture('2569067123_aca715a2ee_o.jpg'));
export const UNLISTED_PHOTO = readFileSync(fixture('concert.jpg'));

/** The PDQ a copy of LISTED_PHOTO would be listed under: resized to a quarter and re-encoded. */
export async function listedCopyHash(): Promise<string> {
  const copy = await sharp(LISTED_PHOTO).resize(681).jpeg({ quality: 60 }).toBuffer();
  const decoded = await decodeRgb(copy, probeHeader(copy, 'jpeg'));
  return pdqOfFrame(decoded.rgb, decoded.width, decoded.height).hash;
}
