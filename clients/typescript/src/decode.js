// Decoding the gateway's frames so that no JSON it may send can break the
// library or the application: however deeply a value is nested (a compute
// host's tool arguments 200,000 levels deep, stored before the gateway
// bounded them), what comes out is nested at most MAX_DEPTH levels.
//
// V8 parses any depth, but recursive code does not (JSON.stringify of such
// an event, or an application walking it, dies of a full stack), and other
// engines' JSON.parse throws on it. So a value deeper than MAX_DEPTH
// (counting from the frame itself) is replaced by the string TOO_DEEP,
// and the frame is otherwise kept whole: its event keeps its seq and is
// delivered, its answer resolves its request. The gateway's own limit for
// what it accepts is 64 levels, far below.

export const MAX_DEPTH = 256;
export const TOO_DEEP = "(nested deeper than " + MAX_DEPTH + " levels; left out by tether-client)";

// `{ value, cut }`: the frame, and whether something in it was replaced.
// Throws SyntaxError for what is not JSON at all.
export function decodeFrame(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    if (err instanceof SyntaxError) {
      throw err;
    }
    // The engine's own recursion limit (RangeError, InternalError): cut
    // the text first, then parse what is left.
    return { value: JSON.parse(cutText(text)), cut: true };
  }
  // Nesting deeper than MAX_DEPTH takes at least 2 * MAX_DEPTH characters.
  const cut = text.length > 2 * MAX_DEPTH && cutValue(value);
  return { value, cut };
}

// Replaces, in place, every array or object nested deeper than MAX_DEPTH
// (the top value being level 1) by TOO_DEEP; whether it found one.
// Iterative, so that the depth of what it walks is no concern.
export function cutValue(top) {
  if (top === null || typeof top !== "object") {
    return false;
  }
  let cut = false;
  const stack = [[top, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop();
    const keys = Array.isArray(node) ? node.keys() : Object.keys(node);
    for (const k of keys) {
      const child = node[k];
      if (child === null || typeof child !== "object") {
        continue;
      }
      if (depth >= MAX_DEPTH) {
        node[k] = TOO_DEEP;
        cut = true;
      } else {
        stack.push([child, depth + 1]);
      }
    }
  }
  return cut;
}

// Strings (skipped whole, whatever brackets they hold) and brackets.
const TOKENS = /"[^"\\]*(?:\\[\s\S][^"\\]*)*"|[[\]{}]/g;

// The same cut on the text, for an engine that cannot parse the original:
// every array or object that opens deeper than MAX_DEPTH is replaced,
// through its matching close, by TOO_DEEP as a JSON string.
export function cutText(text) {
  const out = [];
  let depth = 0;
  let last = 0;
  let from = -1;
  TOKENS.lastIndex = 0;
  for (let m = TOKENS.exec(text); m !== null; m = TOKENS.exec(text)) {
    const c = m[0];
    if (c === "[" || c === "{") {
      depth += 1;
      if (depth === MAX_DEPTH + 1) {
        from = m.index;
      }
    } else if (c === "]" || c === "}") {
      if (depth === MAX_DEPTH + 1 && from >= 0) {
        out.push(text.slice(last, from), JSON.stringify(TOO_DEEP));
        last = m.index + 1;
        from = -1;
      }
      depth -= 1;
    }
  }
  out.push(text.slice(last));
  return out.join("");
}
