"""``python -m train.grpo``: the GRPO stage (:mod:`train.grpo.run`)."""

from train.grpo.run import main

if __name__ == "__main__":
    main()
