import { describe, expect, it } from "vitest";
import { FALLBACK_SUMMARIZER } from "../../src/core/fallback.js";
import { isNewRevision, type RebuildCriteria, selectedForRebuild } from "../../src/core/revisions.js";

const current: RebuildCriteria = { summarizer: "anthropic:claude-haiku-4-5", promptVersion: "optchat-compact-2" };

describe("which nodes a rebuild selects (core/revisions.ts)", () => {
  it("selects another model's or prompt version's summaries and every labelled fallback", () => {
    expect(selectedForRebuild({ summarizer: "openai:gpt-4.1-mini", promptVersion: "optchat-compact-2" }, current)).toBe(
      true,
    );
    expect(
      selectedForRebuild({ summarizer: "anthropic:claude-haiku-4-5", promptVersion: "optchat-compact-1" }, current),
    ).toBe(true);
    expect(selectedForRebuild({ summarizer: FALLBACK_SUMMARIZER, promptVersion: null }, current)).toBe(true);
  });

  it("leaves what the current compactor wrote, free lines and removed markers", () => {
    expect(
      selectedForRebuild({ summarizer: "anthropic:claude-haiku-4-5", promptVersion: "optchat-compact-2" }, current),
    ).toBe(false);
    expect(selectedForRebuild({ summarizer: "free", promptVersion: null }, current)).toBe(false);
    expect(selectedForRebuild({ summarizer: "removed", promptVersion: null }, current)).toBe(false);
  });

  it("with a prompt version, selects exactly the summaries written with it (not fallbacks, whatever the model)", () => {
    const only = { ...current, onlyPromptVersion: "optchat-compact-1" };
    expect(selectedForRebuild({ summarizer: "openai:gpt-4.1-mini", promptVersion: "optchat-compact-1" }, only)).toBe(
      true,
    );
    expect(
      selectedForRebuild({ summarizer: "anthropic:claude-haiku-4-5", promptVersion: "optchat-compact-1" }, only),
    ).toBe(true);
    expect(selectedForRebuild({ summarizer: "openai:gpt-4.1-mini", promptVersion: "optchat-compact-2" }, only)).toBe(
      false,
    );
    expect(selectedForRebuild({ summarizer: FALLBACK_SUMMARIZER, promptVersion: null }, only)).toBe(false);
  });

  it("a rebuilt text is a new revision when its text or its maker changed, not when nothing did", () => {
    const node = { text: "a line", summarizer: "m/1", promptVersion: "p1" };
    expect(isNewRevision(node, { ...node })).toBe(false);
    expect(isNewRevision(node, { ...node, text: "another line" })).toBe(true);
    expect(isNewRevision(node, { ...node, summarizer: "m/2" })).toBe(true);
    expect(isNewRevision(node, { ...node, promptVersion: "p2" })).toBe(true);
  });
});
