"""What every model endpoint of rl_daytona shares, knowing no model: the OpenAI chat wire format
(`openai_chat`), a Tinker SamplingClient behind that endpoint (`sampler`), and server children
started by module name (`launch`). The built-in policy and the simulators build on it; the core
reaches them only through it.
"""
