"""`rmjudge-train` and `rmjudge-export` keep their options: every subcommand's option names, types,
defaults, help and flag behaviour as recorded from 0.8.0's `--help` (the options come from settings
dataclasses; this pins what users see). The options shared with `rmjudge` (--map, --config,
--split, --server ...) are pinned where they are declared, not here."""

from __future__ import annotations

import click
import pytest

SHARED = {"mapping", "config", "split", "server_url", "server_model", "server_concurrency",
          "server_retries", "server_timeout", "server_api", "server_share_prompt", "chat_template"}


def _plain(value):
    """Click's "no value" sentinel as None (its repr differs between Click versions)."""
    return None if "Sentinel" in repr(value) else value


def describe(group: click.Group) -> dict:
    """Per subcommand: its help, then per parameter what `--help` shows and how it parses:
    arguments by metavar -> ("argument", required, nargs); options by their help record ->
    (help text with [default]/[required], default, is_flag, flag_value, multiple)."""
    out = {}
    for name, cmd in sorted(group.commands.items()):
        ctx = click.Context(cmd, info_name=name)
        rows: dict = {"__help__": cmd.help}
        for p in cmd.params:
            if p.name in SHARED:
                continue
            if isinstance(p, click.Argument):
                rows[p.make_metavar(ctx)] = ("argument", p.required, p.nargs)
            else:
                opts, text = p.get_help_record(ctx)
                rows[opts] = (text, None if p.required else _plain(p.get_default(ctx)),
                              p.is_flag, _plain(p.flag_value), p.multiple)
        out[name] = rows
    return out


# Recorded from 0.8.0 (hand-written click options), before the options were generated.
PRECISION_HELP = ("Arithmetic of training and its greedy generations: auto (bfloat16 where the "
                  "device computes it natively: a CUDA GPU that supports it, a CPU with "
                  "AVX512-BF16 or AMX; else float32), bf16 or fp32.  [default: auto]")
RECORDED = {'rmjudge-train': {'build-data': {'__help__': 'Sample rollouts from the base model and write '
                                              'unified Pref + Refl training data\n'
                                              '    (in-process, or through an OpenAI-compatible '
                                              'server with --server URL).',
                                  'SOURCE': ('argument', True, 1),
                                  '-o, --output TEXT': ('Training file: .jsonl or .parquet.  '
                                                        '[required]',
                                                        None,
                                                        False,
                                                        None,
                                                        False),
                                  '--model TEXT': ('Base model: a GGUF (llama.cpp; default: the '
                                                   'embedded model) or an HF directory '
                                                   '(transformers).',
                                                   None,
                                                   False,
                                                   None,
                                                   False),
                                  '--gguf-file TEXT': ('GGUF file name inside --model.',
                                                       None,
                                                       False,
                                                       None,
                                                       False),
                                  '--backend [auto|llama|transformers]': ('auto: llama.cpp for a '
                                                                          'GGUF, transformers '
                                                                          'otherwise.  [default: '
                                                                          'auto]',
                                                                          'auto',
                                                                          False,
                                                                          None,
                                                                          False),
                                  '--samples INTEGER': ('Rollouts per item.  [default: 8]',
                                                        8,
                                                        False,
                                                        None,
                                                        False),
                                  '--temperature FLOAT': ('[default: 1.0]',
                                                          1.0,
                                                          False,
                                                          None,
                                                          False),
                                  '--max-tokens INTEGER': ('Max tokens per rollout.  [default: '
                                                           '1024]',
                                                           1024,
                                                           False,
                                                           None,
                                                           False),
                                  '--ratio TEXT': ('Pref:Refl; 1:0 = RFT baseline.  [default: '
                                                   '4:1]',
                                                   '4:1',
                                                   False,
                                                   None,
                                                   False),
                                  '--seed INTEGER': ('[default: 0]', 0, False, None, False),
                                  '--limit INTEGER': ('Read at most N rows.',
                                                      None,
                                                      False,
                                                      None,
                                                      False),
                                  '--config NAME': ('The config of a Hugging Face dataset input '
                                                    '(hf://datasets/ORG/NAME).',
                                                    None,
                                                    False,
                                                    None,
                                                    False),
                                  '--split NAME': ('The split of a Hugging Face dataset input '
                                                   '(hf://datasets/ORG/NAME, or a save_to_disk '
                                                   'DatasetDict folder).',
                                                   None,
                                                   False,
                                                   None,
                                                   False),
                                  '--cache TEXT': ('Rollout cache (default: '
                                                   'OUTPUT.rollouts.jsonl).',
                                                   None,
                                                   False,
                                                   None,
                                                   False),
                                  '--chunk-items INTEGER': ('Items per generate call.  [default: '
                                                            '16]',
                                                            16,
                                                            False,
                                                            None,
                                                            False),
                                  '--parallel INTEGER': ('llama.cpp live sequences per batch.',
                                                         None,
                                                         False,
                                                         None,
                                                         False),
                                  '--threads INTEGER': ('llama.cpp CPU threads.',
                                                        None,
                                                        False,
                                                        None,
                                                        False),
                                  '--lora TEXT': ('A GGUF LoRA adapter applied to the GGUF '
                                                  '--model (e.g. a warm-start adapter from '
                                                  '`rmjudge-export lora`).',
                                                  None,
                                                  False,
                                                  None,
                                                  False),
                                  '--criteria NAME|@FILE|TEXT': ('Judging criteria in both '
                                                                 'prompts, as `rmjudge score '
                                                                 '--criteria`: a built-in name, '
                                                                 '@FILE or the text (train the '
                                                                 'judge for that rubric).',
                                                                 None,
                                                                 False,
                                                                 None,
                                                                 False),
                                  '--overwrite': ('Replace an existing -o (and its stats file) '
                                                  'that build-data did not write; an input is '
                                                  'never replaced.',
                                                  False,
                                                  True,
                                                  None,
                                                  False),
                                  '-q, --quiet': ('No progress on stderr.',
                                                  False,
                                                  True,
                                                  None,
                                                  False)},
                   'eval': {'__help__': 'Greedy accuracy and positional consistency (Pref in both '
                                        'orders) of a judge.',
                            '--model TEXT': ('Base model: HF directory or a .gguf file.  '
                                             '[required]',
                                             None,
                                             False,
                                             None,
                                             False),
                            '--gguf-file TEXT': ('GGUF file name inside --model.',
                                                 None,
                                                 False,
                                                 None,
                                                 False),
                            '--adapter TEXT': ('LoRA adapter directory (none: the base alone).',
                                               None,
                                               False,
                                               None,
                                               False),
                            '--data TEXT': ('Examples (e.g. OUTPUT_DIR/heldout.jsonl).  '
                                            '[required]',
                                            None,
                                            False,
                                            None,
                                            False),
                            '--max-tokens INTEGER': ('[default: 1024]', 1024, False, None, False),
                            '--limit INTEGER': ('Evaluate at most N examples.',
                                                None,
                                                False,
                                                None,
                                                False),
                            '--quantization [nf4|none]': ('[default: none]',
                                                          'none',
                                                          False,
                                                          None,
                                                          False),
                            '--batch INTEGER': ('Prompts per generate call.  [default: 8]',
                                                8,
                                                False,
                                                None,
                                                False),
                            '--precision [auto|bf16|fp32]': (PRECISION_HELP, 'auto', False, None, False)},
                   'grpo': {'__help__': 'GRPO + QLoRA on the unified data; saves checkpoints, the '
                                        'adapter and a greedy eval.',
                            '--model TEXT': ('Base model: HF directory or hub id, or a .gguf '
                                             'file.  [required]',
                                             None,
                                             False,
                                             None,
                                             False),
                            '--data TEXT': ('Training file from `rmjudge-train build-data`.  '
                                            '[required]',
                                            None,
                                            False,
                                            None,
                                            False),
                            '-o, --output-dir TEXT': ('Checkpoints, logs and the final adapter.  '
                                                      '[required]',
                                                      None,
                                                      False,
                                                      None,
                                                      False),
                            '--gguf-file TEXT': ('GGUF file name inside --model (dequantized by '
                                                 'transformers, cached as HF).',
                                                 None,
                                                 False,
                                                 None,
                                                 False),
                            '--epochs FLOAT': ('Passes over the training split [paper].  '
                                               '[default: 3.0]',
                                               3.0,
                                               False,
                                               None,
                                               False),
                            '--max-steps INTEGER': ('Stop after this many steps (-1: epochs).  '
                                                    '[default: -1]',
                                                    -1,
                                                    False,
                                                    None,
                                                    False),
                            '--batch-size INTEGER': ('Prompts per optimizer step [paper].  '
                                                     '[default: 64]',
                                                     64,
                                                     False,
                                                     None,
                                                     False),
                            '--num-generations INTEGER': ('Completions per prompt [paper].  '
                                                          '[default: 8]',
                                                          8,
                                                          False,
                                                          None,
                                                          False),
                            '--micro-batch INTEGER': ('Completions per forward/backward.  '
                                                      '[default: 8]',
                                                      8,
                                                      False,
                                                      None,
                                                      False),
                            '--generation-prompts INTEGER': ('Prompts per generate call.  '
                                                             '[default: 8]',
                                                             8,
                                                             False,
                                                             None,
                                                             False),
                            '--temperature FLOAT': ('Rollout temperature [paper].  [default: 1.0]',
                                                    1.0,
                                                    False,
                                                    None,
                                                    False),
                            '--max-completion-length INTEGER': ('Max generated tokens per '
                                                                'completion [paper].  [default: '
                                                                '1024]',
                                                                1024,
                                                                False,
                                                                None,
                                                                False),
                            '--max-prompt-tokens INTEGER': ('Examples with longer prompts are '
                                                            'left out (counted per task in '
                                                            'training.json).  [default: 4096]',
                                                            4096,
                                                            False,
                                                            None,
                                                            False),
                            '--keep-mix / --no-keep-mix': ('After leaving out over-long prompts '
                                                           '(mostly Refl: they carry two '
                                                           'analyses), subsample the other task '
                                                           'so the Pref:Refl mix stays as the '
                                                           'data had it.  [default: keep-mix]',
                                                           True,
                                                           True,
                                                           None,
                                                           False),
                            '--learning-rate FLOAT': ("Adapter learning rate (the paper's 1e-6 is "
                                                      'for full weights; LoRA wants more).  '
                                                      '[default: 1e-05]',
                                                      1e-05,
                                                      False,
                                                      None,
                                                      False),
                            '--beta FLOAT': ('KL coefficient (> 0: KL is computed) [ours: the '
                                             'paper gives none].  [default: 0.04]',
                                             0.04,
                                             False,
                                             None,
                                             False),
                            '--loss-type TEXT': ("TRL's GRPO loss: dapo (token mean over the "
                                                 'whole batch: no length bias), grpo '
                                                 '(per-sequence token mean), dr_grpo, bnpo, ... '
                                                 '[ours: the paper names none].  [default: dapo]',
                                                 'dapo',
                                                 False,
                                                 None,
                                                 False),
                            '--warmup-ratio FLOAT': ('Linear warmup share.  [default: 0.03]',
                                                     0.03,
                                                     False,
                                                     None,
                                                     False),
                            '--lora-r INTEGER': ('LoRA rank.  [default: 16]',
                                                 16,
                                                 False,
                                                 None,
                                                 False),
                            '--lora-alpha INTEGER': ('LoRA alpha.  [default: 32]',
                                                     32,
                                                     False,
                                                     None,
                                                     False),
                            '--lora-dropout FLOAT': ('LoRA dropout.  [default: 0.05]',
                                                     0.05,
                                                     False,
                                                     None,
                                                     False),
                            '--target-modules TEXT': ('Comma-separated module names for LoRA, or '
                                                      'all-linear.  [default: '
                                                      'q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]',
                                                      'q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj',
                                                      False,
                                                      None,
                                                      False),
                            '--init-adapter TEXT': ('Continue training this PEFT LoRA adapter of '
                                                    "--model (e.g. `rmjudge-train sft`'s "
                                                    'OUTPUT/adapter) instead of a new one; its '
                                                    'rank, alpha and modules are kept, and the KL '
                                                    'reference is the model with this adapter as '
                                                    'it was loaded.',
                                                    None,
                                                    False,
                                                    None,
                                                    False),
                            '--quantization TEXT': ('nf4 (QLoRA) or none.  [default: nf4]',
                                                    'nf4',
                                                    False,
                                                    None,
                                                    False),
                            '--gradient-checkpointing / --no-gradient-checkpointing': ('Trade '
                                                                                       'compute '
                                                                                       'for '
                                                                                       'memory.  '
                                                                                       '[default: '
                                                                                       'gradient-checkpointing]',
                                                                                       True,
                                                                                       True,
                                                                                       None,
                                                                                       False),
                            '--save-steps INTEGER': ('Checkpoint every N optimizer steps.  '
                                                     '[default: 25]',
                                                     25,
                                                     False,
                                                     None,
                                                     False),
                            '--save-total-limit INTEGER': ('Checkpoints kept.  [default: 3]',
                                                           3,
                                                           False,
                                                           None,
                                                           False),
                            '--logging-steps INTEGER': ('Log every N optimizer steps.  [default: '
                                                        '1]',
                                                        1,
                                                        False,
                                                        None,
                                                        False),
                            '--eval-fraction FLOAT': ('Share of source items held out for the '
                                                      'final evaluation.  [default: 0.05]',
                                                      0.05,
                                                      False,
                                                      None,
                                                      False),
                            '--eval-max-items INTEGER': ('Cap on held-out examples evaluated '
                                                         '(Pref ones in both orders).  [default: '
                                                         '200]',
                                                         200,
                                                         False,
                                                         None,
                                                         False),
                            '--eval-batch INTEGER': ('Prompts per greedy generate call.  '
                                                     '[default: 8]',
                                                     8,
                                                     False,
                                                     None,
                                                     False),
                            '--seed INTEGER': ('Seed of the split, LoRA init and sampling.  '
                                               '[default: 0]',
                                               0,
                                               False,
                                               None,
                                               False),
                            '--precision [auto|bf16|fp32]': (PRECISION_HELP, 'auto', False, None, False),
                            '--resume TEXT': ('Continue from a checkpoint: --resume (latest in '
                                              '-o) or --resume DIR.',
                                              None,
                                              False,
                                              'latest',
                                              False),
                            '--overwrite': ('Write into an -o folder that holds files another '
                                            'command wrote (files of the same name are replaced).',
                                            False,
                                            True,
                                            None,
                                            False),
                            '-q, --quiet': ('No progress on stderr.', False, True, None, False)},
                   'sft': {'__help__': 'Format warm-start: supervised targets (base analyses + '
                                       'gold verdicts, both tasks, both\n'
                                       '    orders) so a weak base learns to write parseable '
                                       'verdicts before build-data and GRPO.',
                           'SOURCE': ('argument', True, 1),
                           '-o, --output-dir TEXT': ('Rollouts, checkpoints, logs, model/ and '
                                                     'adapter/.  [required]',
                                                     None,
                                                     False,
                                                     None,
                                                     False),
                           '--model TEXT': ('Base model: a .gguf file (default: the embedded '
                                            'model) or an HF directory.',
                                            None,
                                            False,
                                            None,
                                            False),
                           '--gguf-file TEXT': ('GGUF file name inside --model.',
                                                None,
                                                False,
                                                None,
                                                False),
                           '--map TEXT': ('Column mapping, as `rmjudge score`.',
                                          None,
                                          False,
                                          None,
                                          True),
                           '--limit INTEGER': ('Read at most N rows.', None, False, None, False),
                           '--tasks TEXT': ('Target tasks: pref, refl or both.  [default: '
                                            'pref,refl]',
                                            'pref,refl',
                                            False,
                                            None,
                                            False),
                           '--analyses TEXT': ("Where target analyses come from: base (the base's "
                                               'own rollouts) or template (short templated '
                                               'descriptions of both responses, no rollouts: a '
                                               'format-only warm-start; '
                                               'training/sft_templates.py).  [default: base]',
                                               'base',
                                               False,
                                               None,
                                               False),
                           '--samples INTEGER': ('Base rollouts per item (analysis source).  '
                                                 '[default: 2]',
                                                 2,
                                                 False,
                                                 None,
                                                 False),
                           '--rollout-max-tokens INTEGER': ('Max tokens per rollout.  [default: '
                                                            '96]',
                                                            96,
                                                            False,
                                                            None,
                                                            False),
                           '--rollout-temperature FLOAT': ('Rollout temperature.  [default: 1.0]',
                                                           1.0,
                                                           False,
                                                           None,
                                                           False),
                           '--max-analysis-chars INTEGER': ('Analyses are cut at a sentence '
                                                            'boundary within this many characters '
                                                            '(keep analysis + verdict under the '
                                                            '--max-tokens used at inference: ~4 '
                                                            'chars/token).  [default: 200]',
                                                            200,
                                                            False,
                                                            None,
                                                            False),
                           '--max-length INTEGER': ('Examples with more prompt + target tokens '
                                                    'are left out (counted).  [default: 2048]',
                                                    2048,
                                                    False,
                                                    None,
                                                    False),
                           '--method TEXT': ('lora (adapter, merged at the end) or full (all '
                                             'weights; tiny models).  [default: lora]',
                                             'lora',
                                             False,
                                             None,
                                             False),
                           '--epochs FLOAT': ('Passes over the examples.  [default: 2.0]',
                                              2.0,
                                              False,
                                              None,
                                              False),
                           '--max-steps INTEGER': ('Stop after N steps (-1: epochs).  [default: '
                                                   '-1]',
                                                   -1,
                                                   False,
                                                   None,
                                                   False),
                           '--batch-size INTEGER': ('Examples per optimizer step.  [default: 8]',
                                                    8,
                                                    False,
                                                    None,
                                                    False),
                           '--micro-batch INTEGER': ('Examples per forward/backward.  [default: '
                                                     '2]',
                                                     2,
                                                     False,
                                                     None,
                                                     False),
                           '--learning-rate FLOAT': ('Learning rate (LoRA; use about 1e-4 with '
                                                     '--method full).  [default: 0.0005]',
                                                     0.0005,
                                                     False,
                                                     None,
                                                     False),
                           '--warmup-ratio FLOAT': ('Linear warmup share.  [default: 0.05]',
                                                    0.05,
                                                    False,
                                                    None,
                                                    False),
                           '--lora-r INTEGER': ('LoRA rank.  [default: 16]',
                                                16,
                                                False,
                                                None,
                                                False),
                           '--lora-alpha INTEGER': ('LoRA alpha.  [default: 32]',
                                                    32,
                                                    False,
                                                    None,
                                                    False),
                           '--lora-dropout FLOAT': ('LoRA dropout.  [default: 0.0]',
                                                    0.0,
                                                    False,
                                                    None,
                                                    False),
                           '--target-modules TEXT': ('Comma-separated module names for LoRA, or '
                                                     'all-linear.  [default: '
                                                     'q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]',
                                                     'q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj',
                                                     False,
                                                     None,
                                                     False),
                           '--save-steps INTEGER': ('Checkpoint every N optimizer steps.  '
                                                    '[default: 50]',
                                                    50,
                                                    False,
                                                    None,
                                                    False),
                           '--save-total-limit INTEGER': ('Checkpoints kept.  [default: 2]',
                                                          2,
                                                          False,
                                                          None,
                                                          False),
                           '--logging-steps INTEGER': ('Log every N optimizer steps.  [default: '
                                                       '1]',
                                                       1,
                                                       False,
                                                       None,
                                                       False),
                           '--check-items INTEGER': ('Items whose Pref prompts (both orders) are '
                                                     'generated greedily before and after '
                                                     'training to measure parse failures (0: '
                                                     'skip).  [default: 8]',
                                                     8,
                                                     False,
                                                     None,
                                                     False),
                           '--check-max-tokens INTEGER': ('Max tokens per check generation.  '
                                                          '[default: 128]',
                                                          128,
                                                          False,
                                                          None,
                                                          False),
                           '--chunk-items INTEGER': ('Items per rollout generate call.  [default: '
                                                     '16]',
                                                     16,
                                                     False,
                                                     None,
                                                     False),
                           '--parallel INTEGER': ('llama.cpp live sequences.',
                                                  None,
                                                  False,
                                                  None,
                                                  False),
                           '--threads INTEGER': ('CPU threads (llama.cpp rollouts and torch).',
                                                 None,
                                                 False,
                                                 None,
                                                 False),
                           '--seed INTEGER': ('Seed of slots, targets, shuffling and init.  '
                                              '[default: 0]',
                                              0,
                                              False,
                                              None,
                                              False),
                           '--precision [auto|bf16|fp32]': (PRECISION_HELP, 'auto', False, None, False),
                           '--criteria NAME|@FILE|TEXT': ('Judging criteria in both prompts, as '
                                                          '`rmjudge score --criteria`: a built-in '
                                                          'name, @FILE or the text (train the '
                                                          'judge for that rubric).',
                                                          None,
                                                          False,
                                                          None,
                                                          False),
                           '--backend [auto|llama|transformers]': ('Rollouts: llama.cpp for a '
                                                                   'GGUF, transformers '
                                                                   'otherwise.  [default: auto]',
                                                                   'auto',
                                                                   False,
                                                                   None,
                                                                   False),
                           '--resume TEXT': ('Continue from a checkpoint: --resume (latest in -o) '
                                             'or --resume DIR.',
                                             None,
                                             False,
                                             'latest',
                                             False),
                           '--overwrite': ('Write into an -o folder that holds files another '
                                           'command wrote (files of the same name are replaced).',
                                           False,
                                           True,
                                           None,
                                           False),
                           '-q, --quiet': ('No progress on stderr.', False, True, None, False)}},
 'rmjudge-export': {'convert': {'__help__': 'Convert a Hugging Face llama/qwen2/qwen3 folder to '
                                            'GGUF.',
                                'MODEL_DIR': ('argument', True, 1),
                                '-o, --out TEXT': ('Output GGUF file.  [required]',
                                                   None,
                                                   False,
                                                   None,
                                                   False),
                                '--outtype [f32|f16|bf16|q8_0]': ('[default: f16]',
                                                                  'f16',
                                                                  False,
                                                                  None,
                                                                  False),
                                '--pre-tokenizer TEXT': ('llama.cpp pre-tokenizer name (detected '
                                                         'from tokenizer.json if omitted).',
                                                         None,
                                                         False,
                                                         None,
                                                         False),
                                '--name TEXT': ('general.name in the GGUF (default: folder name).',
                                                None,
                                                False,
                                                None,
                                                False),
                                '--overwrite': ('Replace an existing output file; an input is '
                                                'never replaced.',
                                                False,
                                                True,
                                                None,
                                                False)},
                    'lora': {'__help__': 'Export a PEFT LoRA adapter as a llama.cpp GGUF LoRA '
                                         '(rmjudge score --lora).',
                             'ADAPTER': ('argument', True, 1),
                             '--base TEXT': ('Base model (Hugging Face folder or GGUF); default: '
                                             "the adapter's own.",
                                             None,
                                             False,
                                             None,
                                             False),
                             '-o, --out TEXT': ('Output GGUF LoRA file.  [required]',
                                                None,
                                                False,
                                                None,
                                                False),
                             '--outtype [f32|f16|bf16]': ('[default: f32]',
                                                          'f32',
                                                          False,
                                                          None,
                                                          False),
                             '--overwrite': ('Replace an existing output file; an input is never '
                                             'replaced.',
                                             False,
                                             True,
                                             None,
                                             False)},
                    'merge': {'__help__': 'Merge a (Q)LoRA adapter into its base; save a Hugging '
                                          'Face folder.',
                              '--base TEXT': ('Base model: Hugging Face folder or GGUF file.  '
                                              '[required]',
                                              None,
                                              False,
                                              None,
                                              False),
                              '--adapter TEXT': ('PEFT LoRA adapter folder.  [required]',
                                                 None,
                                                 False,
                                                 None,
                                                 False),
                              '-o, --out TEXT': ('Output folder.  [required]',
                                                 None,
                                                 False,
                                                 None,
                                                 False),
                              '--dtype [bfloat16|float16|float32]': ('Precision the base is '
                                                                     'reloaded and saved in '
                                                                     '(never 4-bit).  [default: '
                                                                     'bfloat16]',
                                                                     'bfloat16',
                                                                     False,
                                                                     None,
                                                                     False),
                              '--overwrite': ('Write into a folder that already holds files '
                                              '(files of the same name are replaced); an input is '
                                              'never replaced.',
                                              False,
                                              True,
                                              None,
                                              False)},
                    'quantize': {'__help__': 'Quantize an f32/f16/bf16 GGUF with llama.cpp; '
                                             'report size, bpw and fallbacks.',
                                 'MODEL-f16.gguf': ('argument', True, 1),
                                 '-o, --out TEXT': ('Output GGUF file.  [required]',
                                                    None,
                                                    False,
                                                    None,
                                                    False),
                                 '--type [q8_0|q6_k|q5_k_m|q4_k_m|q4_0]': ('[default: Q4_K_M]',
                                                                           'Q4_K_M',
                                                                           False,
                                                                           None,
                                                                           False),
                                 '--threads INTEGER': ('Quantizer threads (0: all cores).',
                                                       0,
                                                       False,
                                                       None,
                                                       False),
                                 '--overwrite': ('Replace an existing output file; an input is '
                                                 'never replaced.',
                                                 False,
                                                 True,
                                                 None,
                                                 False)},
                    'unpack': {'__help__': 'Write a GGUF model (e.g. the embedded judge) as a '
                                           'Hugging Face folder.',
                               'MODEL.gguf': ('argument', True, 1),
                               'OUT_DIR': ('argument', True, 1),
                               '--dtype [bfloat16|float16|float32]': ('[default: float32]',
                                                                      'float32',
                                                                      False,
                                                                      None,
                                                                      False),
                               '--overwrite': ('Write into a folder that already holds files '
                                               '(files of the same name are replaced); an input '
                                               'is never replaced.',
                                               False,
                                               True,
                                               None,
                                               False)},
                    'verify': {'__help__': "Compare next-token logits of HF_DIR with llama.cpp's; "
                                           'exit 1 when parity fails.',
                               'HF_DIR': ('argument', True, 1),
                               '--gguf TEXT': ('GGUF to compare (repeatable).',
                                               None,
                                               False,
                                               None,
                                               True),
                               '--base-gguf TEXT': ('Base GGUF for the run-time LoRA check.',
                                                    None,
                                                    False,
                                                    None,
                                                    False),
                               '--lora TEXT': ('GGUF LoRA applied to --base-gguf.',
                                               None,
                                               False,
                                               None,
                                               False),
                               '--lora-scale FLOAT': ('[default: 1.0]', 1.0, False, None, False),
                               '--prompt TEXT': ('User message to evaluate (repeatable; default: '
                                                 'a fixed built-in set).',
                                                 None,
                                                 False,
                                                 None,
                                                 True),
                               '--threads INTEGER': ('llama.cpp threads (0: all cores).',
                                                     0,
                                                     False,
                                                     None,
                                                     False)}}}


def _groups() -> dict:
    from rmjudge.quantize.cli import main as export
    from rmjudge.training.cli import main as train

    return {"rmjudge-train": train, "rmjudge-export": export}


@pytest.mark.parametrize("program", sorted(RECORDED))
def test_every_subcommand_keeps_its_options(program):
    now = describe(_groups()[program])
    assert sorted(now) == sorted(RECORDED[program])
    for command, recorded in RECORDED[program].items():
        assert now[command] == recorded, command
        assert list(now[command]) == list(recorded), f"{command}: the options' order in --help"



def typed_options(source: str) -> list[str]:
    """Lines of `source` that declare an option or argument by hand: click.option(...),
    click.argument(...), argparse's add_argument(...), optparse's add_option(...)."""
    import ast

    return [f"{node.lineno}: {node.func.attr}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("option", "argument", "add_argument", "add_option")]


@pytest.mark.parametrize("path", ["training/cli.py", "quantize/cli.py"])
def test_no_option_is_typed_by_hand(path):
    """The training and export commands declare no option or argument of their own: every one
    comes from a settings dataclass (or an option bundle shared with `rmjudge`)."""
    from pathlib import Path

    assert typed_options((Path(__file__).resolve().parents[1] / path).read_text()) == []


def test_the_check_finds_options_typed_by_hand():
    source = ('@click.option("--x")\n@click.argument("y")\ndef f(x, y): ...\n'
              'parser.add_argument("--z")\n')
    assert typed_options(source) == ["1: option", "2: argument", "4: add_argument"]


# -- what the generated options parse into: one library call with these settings -------------

def _capture(monkeypatch, module, name: str) -> list:
    """Replace `module.name` by a recorder that stops the command with a user error."""
    from rmjudge.core.errors import UserError

    calls: list = []

    def record(*args, **kw):
        calls.append((args, kw))
        raise UserError("recorded")

    monkeypatch.setattr(module, name, record)
    return calls


def _invoke(group, args: list[str]):
    from click.testing import CliRunner

    r = CliRunner().invoke(group, args)
    assert (r.exit_code, r.output.strip()) == (1, "Error: recorded"), r.output
    return r


def test_grpo_and_sft_parse_into_their_settings_and_run_controls(monkeypatch, tmp_path):
    import rmjudge.training.grpo
    import rmjudge.training.sft
    from rmjudge.training.cli import main

    grpo = _capture(monkeypatch, rmjudge.training.grpo, "run_grpo")
    base = ["grpo", "--model", "m", "--data", "d.jsonl", "-o", str(tmp_path / "r")]
    _invoke(main, base + ["--resume", "--no-keep-mix", "--lora-r", "4", "-q"])
    _invoke(main, base + ["--resume", "ckpt", "--overwrite", "--epochs", "0.5"])
    (args, kw), (args2, kw2) = grpo
    assert (args[0].lora_r, args[0].keep_mix, kw["resume"], kw["overwrite"]) == (
        4, False, "latest", False)
    assert (args2[0].epochs, kw2["resume"], kw2["overwrite"]) == (0.5, "ckpt", True)

    sft = _capture(monkeypatch, rmjudge.training.sft, "warm_start")
    _invoke(main, ["sft", "pairs.jsonl", "-o", str(tmp_path / "w"), "--backend", "llama",
                   "--analyses", "template", "--threads", "2"])
    ((s, backend), kw), = sft
    assert (s.source, s.analyses, s.threads, s.samples, backend, kw["resume"]) == (
        "pairs.jsonl", "template", 2, 2, "llama", None)


def test_build_data_and_eval_parse_into_their_settings(monkeypatch, tmp_path):
    import rmjudge.training.cli
    import rmjudge.training.evaluate
    from rmjudge.training.cli import main

    build = _capture(monkeypatch, rmjudge.training.cli, "run_build_data")
    _invoke(main, ["build-data", "pairs.jsonl", "-o", "t.jsonl", "--map", "prompt=q",
                   "--samples", "3", "--temperature", "0.7", "--overwrite", "--lora", "a.gguf"])
    ((s, server), kw), = build
    assert (s.source, s.output, s.mapping, s.samples, s.temperature, s.overwrite, s.lora,
            s.backend, server) == ("pairs.jsonl", "t.jsonl", "prompt=q", 3, 0.7, True, "a.gguf",
                                   "auto", None)

    ev = _capture(monkeypatch, rmjudge.training.evaluate, "evaluate_judge")
    _invoke(main, ["eval", "--model", "m", "--data", "h.jsonl", "--limit", "5",
                   "--quantization", "nf4"])
    ((e,), _), = ev
    assert (e.model, e.data, e.limit, e.quantization, e.batch, e.adapter) == (
        "m", "h.jsonl", 5, "nf4", 8, None)


def test_export_options_parse_into_the_step_configs(monkeypatch, tmp_path, model_path):
    import rmjudge.quantize.lora
    import rmjudge.quantize.quant
    from rmjudge.quantize.cli import main

    quant = _capture(monkeypatch, rmjudge.quantize.quant, "quantize")
    _invoke(main, ["quantize", model_path, "-o", str(tmp_path / "q.gguf"), "--type", "q8_0",
                   "--threads", "2"])
    ((cfg,), _), = quant
    assert (cfg.src, cfg.qtype, cfg.threads, cfg.overwrite) == (model_path, "Q8_0", 2, False)

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    lora = _capture(monkeypatch, rmjudge.quantize.lora, "export_lora")
    _invoke(main, ["lora", str(adapter), "-o", str(tmp_path / "a.gguf"), "--outtype", "f16"])
    ((cfg,), _), = lora
    assert (cfg.adapter, cfg.base, cfg.out_type) == (str(adapter), None, "f16")

    import rmjudge.quantize.verify

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    verify = _capture(monkeypatch, rmjudge.quantize.verify, "verify")
    _invoke(main, ["verify", str(hf), "--gguf", model_path, "--gguf", model_path,
                   "--prompt", "a", "--prompt", "b"])
    _invoke(main, ["verify", str(hf), "--gguf", model_path])
    ((cfg,), _), ((cfg2,), _) = verify
    assert (cfg.ggufs, cfg.prompts, cfg.lora_scale, cfg.threads) == (
        (model_path, model_path), ("a", "b"), 1.0, 0)
    assert (cfg2.ggufs, cfg2.prompts) == ((model_path,), ())
