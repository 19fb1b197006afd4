"""P-Mem inside agent frameworks: each integration is a module of its own, importing its framework (an
extra of its own), so that ``import pmem`` never does.

- :mod:`pmem.integrations.langgraph`: ``PMemStore``, LangGraph's ``BaseStore`` over a P-Mem store
  (``pip install 'pmem[langgraph]'``).
"""
