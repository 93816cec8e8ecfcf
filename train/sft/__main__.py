"""``python -m train.sft``: the SFT stage (:mod:`train.sft.run`)."""

from train.sft.run import main

if __name__ == "__main__":
    main()
