"""The SGLang mirror: SGLang's PD-multiplexing rules, its pdmux YAML, the revisions pdmux follows and what
each accepts, its GPU-dependent server defaults and KV cache dtype, and readers of what a user's own SGLang
measures. Pure; each module cites the SGLang files its rules come from."""
