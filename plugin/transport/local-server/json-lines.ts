import { StringDecoder } from "node:string_decoder";

/**
 * A socket's bytes as lines (the local server's connections carry one JSON value per line each way): a character
 * split across chunks is decoded whole, and a line waits until its newline has arrived.
 */
export class LineReader {
  private readonly decoder = new StringDecoder("utf8");
  private buffered = "";

  /** The lines `chunk` completes, in order. */
  push(chunk: Buffer): string[] {
    this.buffered += this.decoder.write(chunk);
    const lines = this.buffered.split("\n");
    this.buffered = lines.pop() ?? "";
    return lines;
  }
}
